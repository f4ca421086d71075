package notifications

import (
	"encoding/json"
	"fmt"

	"astro/commands"
	"astro/commands/storable"
	"astro/events"
)

// msgDataUUID is the refusal of a uuid field: it says what the API takes
// there, since the caller speaks to the API.
const msgDataUUID = "Expected a UUID such as 123e4567-e89b-12d3-a456-426614174000, null, or another id, stored as its name-based UUID: an integer or a string of " + events.NameRule + "."

// checkData adds to v, under "data.<field>", what of d (a JSON object the
// caller checked for syntax and storability) NotificationDataDto does not
// allow (events.DataField says why nothing else is stored).
func checkData(d []byte, v commands.Validation) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(d, &fields); err != nil {
		v.Add("data", "The data must be a JSON object.")
		return
	}
	for name, raw := range fields {
		key := "data." + name
		isUUID, known := events.DataField(name)
		if !known {
			if field, ok := events.DataFieldName(name); ok && fields[field] != nil {
				// Another spelling of a field sent too: the api names a
				// field in any case only when it is spelt once.
				v.Add(key, fmt.Sprintf(storable.MsgSameField, field, name))
				continue
			}
			v.Add(key, "Unknown field: data holds only "+events.DataFieldNames+".")
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
