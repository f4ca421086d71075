package notifications

import (
	"encoding/json"
	"strings"

	"astro/commands"
	"astro/events"
)

// dataField says whether name is a field of the public document's
// NotificationDataDto, and whether it holds a uuid. That is a closed
// object: its generated clients decode data into that type, and a strict
// one rejects a whole page for one field it does not know or one taskId
// that is no uuid. So only what they can read is ever stored. Every field
// is a nullable string.
func dataField(name string) (isUUID, known bool) {
	switch name {
	case "taskId", "projectId", "assigneeId":
		return true, true
	case "taskShortId", "projectShortId", "projectName", "taskName", "senderFirstName", "view", "shareId", "fileName":
		return false, true
	}
	return false, false
}

// DataFieldIsUUID reports whether name is a field of NotificationDataDto
// that holds a uuid, for the api, which names what an upstream service
// gives there otherwise before the send reaches checkData.
func DataFieldIsUUID(name string) bool {
	isUUID, _ := dataField(name)
	return isUUID
}

// dataFieldNames lists them for a client's message, in order.
const dataFieldNames = "assigneeId, fileName, projectId, projectName, projectShortId, senderFirstName, shareId, taskId, taskName, taskShortId, view"

// DataFieldName is the field of NotificationDataDto that name spells in
// any case ("TaskName" is taskName), for the api, which reads data's names
// as it reads the body's: .NET clients write them capitalised.
func DataFieldName(name string) (string, bool) {
	for field := range strings.SplitSeq(dataFieldNames, ", ") {
		if strings.EqualFold(field, name) {
			return field, true
		}
	}
	return "", false
}

// msgDataUUID is the refusal of a uuid field: it says what the API takes
// there, since the caller speaks to the API.
const msgDataUUID = "Expected a UUID such as 123e4567-e89b-12d3-a456-426614174000, null, or another id, stored as its name-based UUID: an integer or a string of " + events.NameRule + "."

// checkData adds to v, under "data.<field>", what of d (a JSON object the
// caller checked for syntax and storability) NotificationDataDto does not
// allow.
func checkData(d []byte, v commands.Validation) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(d, &fields); err != nil {
		v.Add("data", "The data must be a JSON object.")
		return
	}
	for name, raw := range fields {
		key := "data." + name
		isUUID, known := dataField(name)
		if !known {
			v.Add(key, "Unknown field: data holds only "+dataFieldNames+".")
			continue
		}
		if string(raw) == "null" {
			continue
		}
		var s string
		err := json.Unmarshal(raw, &s)
		switch {
		case isUUID && (err != nil || !events.ValidUUID(s)):
			// The api named every other id it could (see
			// events.UUIDFor); the message says what it takes.
			v.Add(key, msgDataUUID)
		case err != nil:
			v.Add(key, "Expected a string or null.")
		}
	}
}
