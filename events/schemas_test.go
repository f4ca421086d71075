package events_test

// An external test package: the events package imports only the standard
// library, its tests may use a JSON Schema validator.

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"astro/events"
	"astro/events/natslog"
)

// compileSchema compiles the embedded schema of typ at version, checking
// that its $id is the ce-dataschema its events carry.
func compileSchema(t *testing.T, typ string, version int) *jsonschema.Schema {
	t.Helper()
	raw, ok := events.Schema(typ, version)
	if !ok {
		t.Fatalf("no schema for %s v%d", typ, version)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("%s v%d: %v", typ, version, err)
	}
	id := natslog.DataSchema(typ, version)
	if m, _ := doc.(map[string]any); m["$id"] != id || m["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
		t.Fatalf("%s v%d: $id %v and $schema %v, want %s and draft 2020-12", typ, version, m["$id"], m["$schema"], id)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource(id, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(id)
	if err != nil {
		t.Fatalf("%s v%d does not compile: %v", typ, version, err)
	}
	return s
}

func TestEveryEventVersionHasASchema(t *testing.T) {
	for _, typ := range events.Types() {
		current, ok := events.CurrentVersion(typ)
		if !ok {
			t.Fatalf("%s is in Types but has no version", typ)
		}
		// Every version up to the current one may still be in the log.
		for v := 1; v <= current; v++ {
			compileSchema(t, typ, v)
		}
	}
	// And no schema names a type or a version nobody writes or reads.
	files, err := os.ReadDir("schemas")
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`^([A-Za-z]+)\.v([1-9][0-9]*)\.json$`)
	for _, f := range files {
		m := name.FindStringSubmatch(f.Name())
		if m == nil {
			t.Errorf("schemas/%s: not <Type>.v<N>.json", f.Name())
			continue
		}
		v, _ := strconv.Atoi(m[2])
		if current, ok := events.CurrentVersion(m[1]); !ok || v > current {
			t.Errorf("schemas/%s: %s is not a registered type, or v%d is newer than its current version", f.Name(), m[1], v)
		}
	}
	if _, ok := events.Schema("HolidayCreated", 0); ok {
		t.Error("a schema for version 0")
	}
	if _, ok := events.Schema("../schemas/HolidayCreated", 2); ok {
		t.Error("Schema reads outside schemas/")
	}
}

// TestSchemasMatchPayloads holds the Go payloads and their schemas to each
// other: a fully populated payload of every type validates, and payloads a
// schema must refuse are refused.
func TestSchemasMatchPayloads(t *testing.T) {
	at := time.Date(2027, 1, 2, 3, 4, 5, 123456000, time.UTC)
	id := events.NewID(at)
	other := events.NameID("w1", "alice", "key", "0")
	compaction, erasure := events.NewID(at), events.NewID(at)
	valid := []events.Payload{
		events.NotificationSent{NotificationID: id, RecipientID: "alice", SenderID: "svc-tasks", NotificationType: "task.assigned",
			Subject: "s", Message: "m", Data: json.RawMessage(`{"taskId":42}`), CreateDate: at},
		events.NotificationSent{NotificationID: other, RecipientID: "alice", SenderID: "bob", NotificationType: "t", CreateDate: at},
		events.NotificationRead{NotificationID: id, RecipientID: "alice", ReadDate: at},
		events.NotificationUnread{NotificationID: id, RecipientID: "alice"},
		events.NotificationDeleted{NotificationID: id, RecipientID: "alice", Reason: events.ReasonUser},
		events.NotificationDeleted{NotificationID: id, RecipientID: "alice", Reason: events.ReasonOverflow},
		events.AllNotificationsRead{RecipientID: "alice", NotificationIDs: []string{id, other}, ReadDate: at},
		events.AllNotificationsDeleted{RecipientID: "alice", NotificationIDs: []string{id}, Reason: events.ReasonBulk},
		events.HolidayCreated{HolidayID: id, Reason: "Boxing Day", Type: events.HolidayCountry, DateFrom: "2027-12-26", DateTo: "2027-12-27",
			CountryIDs: []string{"GB", "IE"}, ResourceIDs: []string{}},
		events.HolidayCreated{HolidayID: id, Reason: "Offsite", Type: events.HolidayPeople, DateFrom: "2027-03-01", DateTo: "2027-03-03",
			CountryIDs: []string{}, ResourceIDs: []string{"r-1", "r_2"}},
		events.HolidayRenamed{HolidayID: id, OldReason: "Boxing Day", NewReason: "St Stephen's Day"},
		events.ResourceUpserted{ResourceID: "r-1", Name: "Ann", CountryCode: "GB", IsActive: true, IsGuest: false},
		events.ResourceUpserted{ResourceID: "r-2", Name: "", CountryCode: "", IsActive: false, IsGuest: true},
		events.InboxCompacted{RecipientID: "alice", CompactionID: compaction, Part: 1, Parts: 2, NotificationIDs: []string{other, id},
			Notifications: []events.CompactedNotification{{NotificationID: other, SenderID: "bob", NotificationType: "t", CreateDate: at, ReadDate: &at}}},
		events.InboxCompacted{RecipientID: "alice", CompactionID: compaction, Part: 2, Parts: 2,
			Notifications: []events.CompactedNotification{{NotificationID: id, SenderID: "svc-tasks", NotificationType: "task.assigned",
				Subject: "s", Message: "m", Data: json.RawMessage(`{"taskId":42}`), CreateDate: at}}},
		events.InboxCompacted{RecipientID: "alice", CompactionID: compaction, Part: 1, Parts: 1, Notifications: []events.CompactedNotification{}},
		events.InboxErased{ErasureID: erasure, Notifications: 2},
		events.InboxErased{ErasureID: erasure, Notifications: 0},
		events.WorkspaceErased{ErasureID: erasure, Holidays: 3, Resources: 2, Inboxes: 1},
	}
	covered := map[string]bool{}
	for _, p := range valid {
		covered[p.EventType()] = true
		data, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		validate(t, p.EventType(), p.EventVersion(), string(data), true)
	}
	for _, typ := range events.Types() {
		if !covered[typ] {
			t.Errorf("%s has no payload in this test", typ)
		}
	}

	invalid := []struct {
		name, typ string
		version   int
		data      string
	}{
		{"unknown field", "HolidayRenamed", 1, `{"holidayId":"` + id + `","oldReason":"a","newReason":"b","by":"x"}`},
		{"missing field", "HolidayRenamed", 1, `{"holidayId":"` + id + `","newReason":"b"}`},
		{"v1 field in v2", "HolidayCreated", 2, `{"holidayId":"` + id + `","reason":"r","type":"country","dateFrom":"2027-01-01","dateTo":"2027-01-01","countryId":"GB","countryIds":["GB"],"resourceIds":[]}`},
		{"v2 field in v1", "HolidayCreated", 1, `{"holidayId":"` + id + `","reason":"r","type":"country","dateFrom":"2027-01-01","dateTo":"2027-01-01","countryIds":["GB"]}`},
		{"bad date", "HolidayCreated", 2, `{"holidayId":"` + id + `","reason":"r","type":"global","dateFrom":"2027-02-30","dateTo":"2027-03-01","countryIds":[],"resourceIds":[]}`},
		{"bad type", "HolidayCreated", 2, `{"holidayId":"` + id + `","reason":"r","type":"lunar","dateFrom":"2027-01-01","dateTo":"2027-01-01","countryIds":[],"resourceIds":[]}`},
		{"lower-case country", "HolidayCreated", 2, `{"holidayId":"` + id + `","reason":"r","type":"country","dateFrom":"2027-01-01","dateTo":"2027-01-01","countryIds":["gb"],"resourceIds":[]}`},
		{"bad notification id", "NotificationRead", 1, `{"notificationId":"42","recipientId":"alice","readDate":"2027-01-01T00:00:00Z"}`},
		{"unknown delete reason", "NotificationDeleted", 1, `{"notificationId":"` + id + `","recipientId":"alice","reason":"expired"}`},
		{"data not an object", "NotificationSent", 1, `{"notificationId":"` + id + `","recipientId":"a","senderId":"b","notificationType":"t","subject":"","message":"","data":[1],"createDate":"2027-01-01T00:00:00Z"}`},
		{"recipient with a dot", "AllNotificationsDeleted", 1, `{"recipientId":"a.b","notificationIds":["` + id + `"],"reason":"bulk"}`},
		{"ids on a later part", "InboxCompacted", 1, `{"recipientId":"alice","compactionId":"` + id + `","part":2,"parts":2,"notificationIds":["` + id + `"],"notifications":[]}`},
		{"part 0", "InboxCompacted", 1, `{"recipientId":"alice","compactionId":"` + id + `","part":0,"parts":1,"notifications":[]}`},
		{"null notifications", "InboxCompacted", 1, `{"recipientId":"alice","compactionId":"` + id + `","part":1,"parts":1,"notifications":null}`},
		{"compacted without content", "InboxCompacted", 1, `{"recipientId":"alice","compactionId":"` + id + `","part":1,"parts":1,"notifications":[{"notificationId":"` + id + `","createDate":"2027-01-01T00:00:00Z"}]}`},
		{"erasure naming the recipient", "InboxErased", 1, `{"erasureId":"` + id + `","notifications":1,"recipientId":"alice"}`},
		{"negative count", "WorkspaceErased", 1, `{"erasureId":"` + id + `","holidays":-1,"resources":0,"inboxes":0}`},
	}
	for _, c := range invalid {
		t.Run(c.name, func(t *testing.T) { validate(t, c.typ, c.version, c.data, false) })
	}
}

// TestHolidayCreatedV1UpcastsToV2 shows the two schemas and the upcaster
// agree: every valid v1 payload becomes a valid v2 payload.
func TestHolidayCreatedV1UpcastsToV2(t *testing.T) {
	id := events.NewID(time.Now())
	cases := []struct {
		name, v1      string
		wantCountries []string
	}{
		{"country", `"type":"country","countryId":"GB","resourceIds":[]`, []string{"GB"}},
		{"empty country", `"type":"global","countryId":"","resourceIds":[]`, []string{}},
		{"no country, no resources", `"type":"global"`, []string{}},
		{"people", `"type":"people","resourceIds":["r-1"]`, []string{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v1 := `{"holidayId":"` + id + `","reason":"R","dateFrom":"2027-01-01","dateTo":"2027-01-01",` + c.v1 + `}`
			validate(t, "HolidayCreated", 1, v1, true)
			p, err := events.Decode(events.Event{ID: id, Type: "HolidayCreated", Version: 1, Data: json.RawMessage(v1)})
			if err != nil {
				t.Fatal(err)
			}
			h := p.(*events.HolidayCreated)
			if !slices.Equal(h.CountryIDs, c.wantCountries) {
				t.Fatalf("countryIds %v, want %v", h.CountryIDs, c.wantCountries)
			}
			// The upcaster fills countryIds but leaves a missing
			// resourceIds nil: Go readers see no resources either way, but
			// re-encoded it would be null, which v2 does not allow.
			if h.ResourceIDs == nil {
				h.ResourceIDs = []string{}
			}
			v2, err := json.Marshal(h)
			if err != nil {
				t.Fatal(err)
			}
			validate(t, "HolidayCreated", 2, string(v2), true)
		})
	}
}

func validate(t *testing.T, typ string, version int, data string, wantValid bool) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(data))
	if err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	err = compileSchema(t, typ, version).Validate(v)
	switch {
	case wantValid && err != nil:
		t.Errorf("%s v%d refuses %s: %v", typ, version, data, err)
	case !wantValid && err == nil:
		t.Errorf("%s v%d accepts %s", typ, version, data)
	}
}
