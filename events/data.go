package events

import (
	"encoding/json"
	"strings"
)

// DataField says whether name is a field of the public document's
// NotificationDataDto, and whether it holds a uuid. That is a closed
// object: its generated clients decode a notification's data into that
// type, and a strict one rejects a whole page for one field it does not
// know or one taskId that is no uuid. So only what they can read is ever
// stored or served: the send command refuses the rest, and NormalData
// turns what an older Astro stored into it. Every field is a nullable
// string.
func DataField(name string) (isUUID, known bool) {
	switch name {
	case "taskId", "projectId", "assigneeId":
		return true, true
	case "taskShortId", "projectShortId", "projectName", "taskName", "senderFirstName", "view", "shareId", "fileName":
		return false, true
	}
	return false, false
}

// DataFieldNames lists NotificationDataDto's fields for a client's
// message, in order.
const DataFieldNames = "assigneeId, fileName, projectId, projectName, projectShortId, senderFirstName, shareId, taskId, taskName, taskShortId, view"

// DataFieldName is the field of NotificationDataDto that name spells in
// any case ("TaskName" is taskName): .NET clients write them capitalised,
// and the api reads data's names as it reads the body's.
func DataFieldName(name string) (string, bool) {
	for field := range strings.SplitSeq(DataFieldNames, ", ") {
		if strings.EqualFold(field, name) {
			return field, true
		}
	}
	return "", false
}

// DataUUID is the UUID a uuid field of data (value, its JSON) stands for,
// as a JSON string: a UUID lower-cased, any other string and any integer
// named by UUIDFor (42 by the UUID of "42", so an id the caller has as a
// number or as text is the same id). null stays null. ok is false for
// what it cannot name: another type, or a string UUIDFor refuses. The api
// names a send's ids by it, and NormalData an old event's, so both give
// one id the same UUID.
func DataUUID(value json.RawMessage) (json.RawMessage, bool) {
	var name string
	switch {
	case len(value) == 0:
		return nil, false
	case string(value) == "null":
		return value, true
	case value[0] == '"':
		if json.Unmarshal(value, &name) != nil {
			return nil, false
		}
	case isJSONInteger(value):
		name = string(value)
	default:
		return nil, false
	}
	id, ok := UUIDFor(name)
	if !ok {
		return nil, false
	}
	return json.RawMessage(`"` + id + `"`), true
}

// isJSONInteger reports whether a JSON number is written as an integer:
// digits, perhaps a minus, no fraction and no exponent. 7.0 and 7e0 are
// not: their text is no id anyone has.
func isJSONInteger(n []byte) bool {
	if len(n) > 0 && n[0] == '-' {
		n = n[1:]
	}
	if len(n) == 0 {
		return false
	}
	for _, c := range n {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
