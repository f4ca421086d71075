package events

import "encoding/json"

// registry maps each event type to a constructor of its current payload.
var registry = map[string]func() Payload{
	"NotificationSent":        func() Payload { return new(NotificationSent) },
	"NotificationRead":        func() Payload { return new(NotificationRead) },
	"NotificationUnread":      func() Payload { return new(NotificationUnread) },
	"NotificationDeleted":     func() Payload { return new(NotificationDeleted) },
	"AllNotificationsRead":    func() Payload { return new(AllNotificationsRead) },
	"AllNotificationsDeleted": func() Payload { return new(AllNotificationsDeleted) },
	"HolidayCreated":          func() Payload { return new(HolidayCreated) },
	"HolidayRenamed":          func() Payload { return new(HolidayRenamed) },
	"ResourceUpserted":        func() Payload { return new(ResourceUpserted) },
	"InboxCompacted":          func() Payload { return new(InboxCompacted) },
	"InboxErased":             func() Payload { return new(InboxErased) },
	"WorkspaceErased":         func() Payload { return new(WorkspaceErased) },
}

// Types lists every event type, for schemas and documentation.
func Types() []string {
	out := make([]string, 0, len(registry))
	for t := range registry {
		out = append(out, t)
	}
	return out
}

// upcasters turn version v of a type's data into version v+1, keyed by
// type and v. Decode chains them up to the current version.
var upcasters = map[string]map[int]func(json.RawMessage) (json.RawMessage, error){
	"HolidayCreated": {1: holidayCreatedV1toV2},
}

func upcast(typ string, version int, data json.RawMessage) (json.RawMessage, error) {
	for steps := upcasters[typ]; ; version++ {
		up, ok := steps[version]
		if !ok {
			return data, nil
		}
		var err error
		if data, err = up(data); err != nil {
			return nil, err
		}
	}
}

// holidayCreatedV1toV2: v1 had one "countryId" string.
func holidayCreatedV1toV2(data json.RawMessage) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	var country string
	if raw, ok := m["countryId"]; ok {
		if err := json.Unmarshal(raw, &country); err != nil {
			return nil, err
		}
		delete(m, "countryId")
	}
	ids := []string{}
	if country != "" {
		ids = append(ids, country)
	}
	list, _ := json.Marshal(ids) // a []string always encodes
	m["countryIds"] = list
	// v2 lists are never null; v1 writers may have left resourceIds out.
	if raw, ok := m["resourceIds"]; !ok || string(raw) == "null" {
		m["resourceIds"] = json.RawMessage("[]")
	}
	return json.Marshal(m)
}
