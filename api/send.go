package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"astro/commands"
	"astro/commands/notifications"
	"astro/commands/storable"
	"astro/events"
)

// SendRequest is the body of a notification send on every transport: POST
// /api/data/notifications and the NATS subject of api/natscmd. Its fields'
// rules are the command's (notifications.Send), so both transports refuse
// the same bodies with the same validation errors.
type SendRequest struct {
	// WorkspaceID is optional and never decides anything: the token names
	// the workspace. Command refuses a body naming another one.
	WorkspaceID      string          `json:"workspaceId"`
	RecipientID      string          `json:"recipientId"`
	SenderID         string          `json:"senderId"`
	NotificationType string          `json:"notificationType"`
	Subject          string          `json:"subject"`
	Message          string          `json:"message"`
	Data             json.RawMessage `json:"data"`
}

// DecodeSend reads a send from its JSON body, with the rules of every body
// of this API (a JSON object, nothing after it, nothing the read model
// could not store).
func DecodeSend(body []byte) (SendRequest, error) {
	var req SendRequest
	err := decodeObject(body, &req)
	return req, err
}

// Command is the send the caller c asks for, its ids as the public
// document types them: the sender and data's uuid fields named by their
// UUID (see events.UpstreamID, nameData). The command refuses what is left that
// is no UUID.
//
// A body whose workspaceId names a workspace other than c's is refused
// (403) here, where every transport turns a body into the command: the
// token decides the workspace, and a field naming another one is a client
// bug or an attempt, never to be delivered into the token's workspace.
// The token's own workspace, or none, is accepted.
func (r SendRequest) Command(c commands.Caller) (notifications.Send, error) {
	if r.WorkspaceID != "" && r.WorkspaceID != c.WorkspaceID {
		return notifications.Send{}, commands.Errorf(commands.EForbidden, "workspaceId is not the workspace of the token.")
	}
	return notifications.Send{
		Caller: c, RecipientID: r.RecipientID, SenderID: events.UpstreamID(r.SenderID), NotificationType: r.NotificationType,
		Subject: r.Subject, Message: r.Message, Data: nameData(r.Data),
	}, nil
}

// nameData returns data (a send's, already held to the body rules) with
// NotificationDataDto's field names in their own case, as the body's are
// read in any case, and its uuid fields as UUIDs: named by
// events.DataUUID, the rule events.NormalData applies to what an older
// Astro stored. What it cannot name (another type, an unacceptable
// string) is left for the command to refuse, and so is any data that is
// no object. Data that needs no change is returned as it came; otherwise
// the other members' values are kept byte for byte, in their order, and
// only the keys are written anew (as the same strings) and the spaces
// between members go.
func nameData(data json.RawMessage) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return data
	}
	var out bytes.Buffer
	out.WriteByte('{')
	changed := false
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return data
		}
		name, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return data
		}
		if field, ok := events.DataFieldName(name); ok {
			if seen[field] {
				return data // one field twice: the command refuses the spelling it does not know
			}
			seen[field] = true
			if field != name {
				name, changed = field, true
			}
		}
		if isUUID, _ := events.DataField(name); isUUID {
			if named, ok := events.DataUUID(value); ok && !bytes.Equal(named, value) {
				value, changed = named, true
			}
		}
		if out.Len() > 1 {
			out.WriteByte(',')
		}
		key, _ := json.Marshal(name) // a string always encodes
		out.Write(key)
		out.WriteByte(':')
		out.Write(value)
	}
	if !changed {
		return data
	}
	out.WriteByte('}')
	return out.Bytes()
}

// decodeObject decodes body, a JSON object, into dst; its errors are the
// 400s a client can act on.
func decodeObject(body []byte, dst any) error {
	// RFC 8259 lets a parser ignore a byte order mark, and some clients
	// (.NET's, writing a file's text) send one.
	body = bytes.TrimPrefix(body, []byte("\ufeff"))
	if len(bytes.TrimSpace(body)) == 0 {
		return commands.Errorf(commands.EInvalid, "A JSON body is required.")
	}
	// Every body of this API is an object; json would take null (or a
	// list, for a field-less target) as an empty request.
	if bytes.TrimSpace(body)[0] != '{' {
		return commands.Errorf(commands.EInvalid, "The body must be a JSON object.")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(dst); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return commands.Invalid(typeErrors(body, reflect.TypeOf(dst).Elem(), typeErr))
		}
		return commands.Errorf(commands.EInvalid, "The body is not valid JSON.")
	}
	// More() misses a stray '}' or ']'; what follows the value must be
	// white space.
	if len(bytes.TrimSpace(body[dec.InputOffset():])) > 0 {
		return commands.Errorf(commands.EInvalid, "The body is not valid JSON: unexpected data after the object.")
	}
	// encoding/json took in silence what the read model would refuse.
	return storable.Err(body)
}

// typeErrors names every field of body whose value has the wrong type for
// a t, first being the one encoding/json reported: it reports only the
// first, and a client fixing one field a round trip would learn of the
// next only then. Each field is decoded alone into a fresh t.
func typeErrors(body []byte, t reflect.Type, first *json.UnmarshalTypeError) map[string][]string {
	add := func(errs map[string][]string, e *json.UnmarshalTypeError) {
		errs[e.Field] = []string{fmt.Sprintf("Expected a %s.", jsonKind(e.Type.Kind().String()))}
	}
	errs := map[string][]string{}
	add(errs, first) // a key given twice is one entry below, its last
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(body, &fields) // the whole body decoded but for types
	for key, value := range fields {
		one, _ := json.Marshal(map[string]json.RawMessage{key: value}) // raw JSON always encodes
		var typeErr *json.UnmarshalTypeError
		if err := json.Unmarshal(one, reflect.New(t).Interface()); errors.As(err, &typeErr) && typeErr.Field != "" {
			add(errs, typeErr)
		}
	}
	return errs
}
