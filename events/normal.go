package events

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Today's forms of what an older Astro wrote. Before ids were named where
// a request enters (UpstreamID) and a notification's data was held to
// NotificationDataDto (DataField), Astro stored any id where the public
// document types one as uuid ("senderId":"bob", a resource "res-000") and
// any object as data ({"taskId":42,"marker":"x"}). The log keeps those
// events as they were written, and is not rewritten: whatever serves an
// event's content (the projectors, the notification stream, a
// compaction's restatement, a holiday as of a past moment) passes it
// through Normal first, so a generated client reads every answer, and an
// old id is the same UUID as the one today's requests name it by
// ("?senderId=bob", "PUT /api/data/resources/res-000"). Normal changes
// nothing that today's Astro writes.

// NilUUID is RFC 9562's Nil UUID, the id of no one: the sender a
// notification is served with when its old senderId names no UUID.
const NilUUID = "00000000-0000-0000-0000-000000000000"

// Normal is the notification as today's Astro would have stored it: its
// sender and data by NormalSender and NormalData, its texts by NormalText.
func (p NotificationSent) Normal() NotificationSent {
	p.SenderID = NormalSender(p.SenderID)
	p.NotificationType, p.Subject, p.Message = NormalText(p.NotificationType), NormalText(p.Subject), NormalText(p.Message)
	p.Data = NormalData(p.Data)
	return p
}

// Normal is the notification as today's Astro would have stored it; see
// NotificationSent.Normal.
func (n CompactedNotification) Normal() CompactedNotification {
	n.SenderID = NormalSender(n.SenderID)
	n.NotificationType, n.Subject, n.Message = NormalText(n.NotificationType), NormalText(n.Subject), NormalText(n.Message)
	n.Data = NormalData(n.Data)
	return n
}

// NormalText is a text as PostgreSQL can store it. An older Astro took NUL
// in a notification's texts, which today's refuses at the door and the
// read model cannot hold: the projector parked such a notification, and
// every compaction restating it. Each NUL becomes U+FFFD, the character
// that stands for one that cannot be shown.
func NormalText(s string) string {
	if !strings.Contains(s, "\x00") {
		return s
	}
	return strings.ReplaceAll(s, "\x00", "\ufffd")
}

// normalString is a data string as PostgreSQL can store it, and true, when
// it must change: an older Astro kept data's strings as they came, with
// \u0000 and lone surrogate escapes, which jsonb refuses. Decoding turns a
// lone surrogate into U+FFFD; NormalText does the same for NUL.
func normalString(value json.RawMessage) (json.RawMessage, bool) {
	if !bytes.Contains(value, []byte(`\u`)) {
		return nil, false
	}
	var s string
	if json.Unmarshal(value, &s) != nil || !strings.ContainsAny(s, "\x00\ufffd") {
		return nil, false
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(NormalText(s)) // a string always encodes
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), true
}

// Normal is the compaction part with each notification's Normal: a
// compaction an older Astro wrote restates the old forms.
func (p InboxCompacted) Normal() InboxCompacted {
	if p.Notifications != nil {
		ns := make([]CompactedNotification, len(p.Notifications))
		for i, n := range p.Notifications {
			ns[i] = n.Normal()
		}
		p.Notifications = ns
	}
	return p
}

// NormalSender is a notification's sender as today's Astro keeps it: its
// UUIDFor, or NilUUID when it has none. senderId is no nullable field, and
// leaving the notification out would hide it from its recipient and make
// the read model's counts disagree with the inbox, whose commands count
// it; the Nil UUID says "no sender known" in a form every client reads.
// An old senderId matched [A-Za-z0-9_-]{1,64}, so what comes to that is 32
// hex digits, a UUID without its hyphens, which UUIDFor refuses to take
// for the name of another.
func NormalSender(id string) string {
	if u, ok := UUIDFor(id); ok {
		return u
	}
	return NilUUID
}

// NormalData is a notification's data as today's Astro would store it:
// an object of NotificationDataDto's fields only, named in their own case
// (DataFieldName), the uuid fields named by DataUUID, the others strings.
// Each field is nullable, so a value that is neither (a uuid field
// DataUUID cannot name, a number in taskName) becomes null rather than a
// guess at what was meant. A string PostgreSQL cannot store is made one it
// can (normalString). Unknown fields go, and so does data that is no
// object: it is served as {}. One field spelt twice keeps its own
// spelling's value, else the first. Data that needs no change is returned
// as it came; otherwise the kept members' bytes stay, in their order,
// without the spaces between them.
func NormalData(data json.RawMessage) json.RawMessage {
	if len(data) == 0 {
		return data
	}
	type member struct {
		field string
		exact bool // spelt as the field is
		value json.RawMessage
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	var members []member
	at := map[string]int{}
	changed := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		name, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil
		}
		field, known := DataFieldName(name)
		if !known {
			changed = true
			continue
		}
		m := member{field: field, exact: field == name, value: value}
		if !m.exact {
			changed = true
		}
		if isUUID, _ := DataField(field); isUUID {
			named, ok := DataUUID(value)
			if !ok {
				named = json.RawMessage("null")
			}
			if !bytes.Equal(named, value) {
				m.value, changed = named, true
			}
		} else if value[0] != '"' && string(value) != "null" {
			m.value, changed = json.RawMessage("null"), true
		} else if s, ok := normalString(value); ok {
			m.value, changed = s, true
		}
		if i, seen := at[field]; seen {
			changed = true
			if m.exact && !members[i].exact {
				members[i] = m
			}
			continue
		}
		at[field] = len(members)
		members = append(members, m)
	}
	if !changed {
		return data
	}
	var out bytes.Buffer
	out.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			out.WriteByte(',')
		}
		key, _ := json.Marshal(m.field) // a string always encodes
		out.Write(key)
		out.WriteByte(':')
		out.Write(m.value)
	}
	out.WriteByte('}')
	return out.Bytes()
}

// Normal is the holiday as today's Astro would have stored it: its
// resources by NormalResourceIDs.
func (p HolidayCreated) Normal() HolidayCreated {
	p.ResourceIDs = NormalResourceIDs(p.ResourceIDs)
	return p
}

// NormalResourceIDs are a holiday's resources as today's Astro names them:
// each by UUIDFor, once, in their order. One that cannot be named is left
// out, as its resource is (see ResourceUpserted.Normal); the holiday still
// applies to the others. A nil list stays nil.
func NormalResourceIDs(ids []string) []string {
	if ids == nil {
		return nil
	}
	out := make([]string, 0, len(ids))
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if u, ok := UUIDFor(id); ok && !seen[u] {
			seen[u] = true
			out = append(out, u)
		}
	}
	return out
}

// Normal is the resource as today's Astro names it: its id by UUIDFor, so
// an old "res-000" and today's PUT /api/data/resources/res-000 are one
// resource. ok is false when the id names no UUID: the resource is then
// left out of what is served. Its id is no nullable field, and the Nil
// UUID would make every such resource one. An old id matched
// [A-Za-z0-9_-]{1,64}, so what comes to that is 32 hex digits, which
// today's upsert refuses too.
func (p ResourceUpserted) Normal() (ResourceUpserted, bool) {
	u, ok := UUIDFor(p.ResourceID)
	p.ResourceID = u
	return p, ok
}
