package notifications

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"astro/commands"
	"astro/events"
)

// dataFields are the fields of the public document's NotificationDataDto, a
// closed object: its generated clients decode data into that type, and a
// strict one rejects a whole page for one field it does not know or one
// taskId that is no uuid. So only what they can read is ever stored. Every
// field is a nullable string; those marked are uuids.
var dataFields = map[string]bool{
	"taskId":          true,
	"projectId":       true,
	"assigneeId":      true,
	"taskShortId":     false,
	"projectShortId":  false,
	"projectName":     false,
	"taskName":        false,
	"senderFirstName": false,
	"view":            false,
	"shareId":         false,
	"fileName":        false,
}

// checkData adds to v, under "data.<field>", what of d (a JSON object the
// caller checked for syntax and storability) NotificationDataDto does not
// allow.
func checkData(d []byte, v commands.Validation) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(d, &fields); err != nil {
		v.Add("data", "The data must be a JSON object.")
		return
	}
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	sort.Strings(names) // one order of messages for one body
	for _, name := range names {
		raw := fields[name]
		key := "data." + name
		isUUID, known := dataFields[name]
		if !known {
			v.Add(key, fmt.Sprintf("Unknown field: data holds only %s.", knownDataFields()))
			continue
		}
		if string(raw) == "null" {
			continue
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			v.Add(key, "Expected a string or null.")
			continue
		}
		if isUUID && !events.ValidUUID(s) {
			v.Add(key, "Expected a UUID such as 123e4567-e89b-12d3-a456-426614174000, or null.")
		}
	}
}

func knownDataFields() string {
	names := make([]string, 0, len(dataFields))
	for name := range dataFields {
		names = append(names, name)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
