package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"astro/commands"
	"astro/commands/notifications"
	"astro/commands/storable"
)

// SendRequest is the body of a notification send on every transport: POST
// /api/data/notifications and the NATS subject of api/natscmd. Its fields'
// rules are the command's (notifications.Send), so both transports refuse
// the same bodies with the same validation errors.
type SendRequest struct {
	// WorkspaceID is read but never decides anything: the token names the
	// workspace. natscmd refuses a message naming another one.
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

// Command is the send the caller c asks for.
func (r SendRequest) Command(c commands.Caller) notifications.Send {
	return notifications.Send{
		Caller: c, RecipientID: r.RecipientID, SenderID: r.SenderID, NotificationType: r.NotificationType,
		Subject: r.Subject, Message: r.Message, Data: r.Data,
	}
}

// decodeObject decodes body, a JSON object, into dst; its errors are the
// 400s a client can act on.
func decodeObject(body []byte, dst any) error {
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
			return commands.Invalid(map[string][]string{typeErr.Field: {fmt.Sprintf("Expected a %s.", jsonKind(typeErr.Type.Kind().String()))}})
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
