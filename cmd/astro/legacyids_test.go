package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"astro/events"
	"astro/projections"
)

// hex32 is an id an older Astro took where the public document types a
// uuid (it matched [A-Za-z0-9_-]{1,64}) that names no UUID: a UUID without
// its hyphens, which today's requests are refused for.
const hex32 = "0123456789abcdef0123456789abcdef"

// uuidOf42 is events.NameUUID("42"), pinned by events' TestNameUUID.
const uuidOf42 = "cec6663a-faab-5b8a-a9b8-cd31004901ee"

// TestLegacyIDsAreServedInTodaysForms puts into the log what an older
// Astro wrote, which took any id where the public document says uuid and
// any object as data: a notification from "bob" with data {"taskId":42,
// "marker":"x"}, one whose ids name no UUID, a resource "res-000" and a
// people holiday of it. The read models served them verbatim, and a
// generated client failed on the whole page (the harness holds every
// answer to both documents); ?senderId=bob missed them, and PUT
// /api/data/resources/res-000 made a second resource beside the old one.
// Now every answer has today's forms, the history shows the events as
// they were, a read model an older Astro built is rebuilt at start, and a
// compaction restates the old notifications in today's forms.
func TestLegacyIDsAreServedInTodaysForms(t *testing.T) {
	s := startService(t)
	hol := token(t, "svc-hol", "w1", "resources:write")
	alice := token(t, "alice", "w1")

	// Alice's stream is open before the old events reach the log.
	st, _ := s.stream(alice, "")
	if e := st.next(); e.Name != "snapshot" {
		t.Fatalf("first event %s, want a snapshot", e.Name)
	}

	inbox := events.Aggregate{Kind: events.KindInbox, ID: "alice"}
	fromBob, fromNoOne := events.NewID(time.Now()), events.NewID(time.Now())
	at := appendAsWritten(t, s, "NotificationSent", 1, inbox, 0, `{"notificationId":"`+fromBob+`","recipientId":"alice","senderId":"bob",`+
		`"notificationType":"task","subject":"s","message":"m","data":{"taskId":42,"marker":"x"},"createDate":"2026-01-01T00:00:00Z"}`)
	appendAsWritten(t, s, "NotificationSent", 1, inbox, at, `{"notificationId":"`+fromNoOne+`","recipientId":"alice","senderId":"`+hex32+`",`+
		`"notificationType":"task","subject":"s","message":"m","data":{"taskId":"`+hex32+`","taskName":7},"createDate":"2026-01-01T00:00:01Z"}`)
	for _, id := range []string{"res-000", hex32} {
		appendAsWritten(t, s, "ResourceUpserted", 1, events.Aggregate{Kind: events.KindResource, ID: id}, 0,
			`{"resourceId":"`+id+`","name":"Old","countryCode":"GB","isActive":true,"isGuest":false}`)
	}
	people := events.NewID(time.Now())
	appendAsWritten(t, s, "HolidayCreated", 2, events.Aggregate{Kind: events.KindHoliday, ID: people}, 0, `{"holidayId":"`+people+
		`","reason":"Offsite","type":"people","dateFrom":"2027-03-01","dateTo":"2027-03-01","countryIds":[],"resourceIds":["res-000","`+hex32+`"]}`)

	// What a client is served, by id: the sender and the data.
	want := map[string]struct {
		sender string
		data   map[string]any
	}{
		fromBob: {uuidOfBob, map[string]any{"taskId": uuidOf42}},
		// Names no UUID: no sender known, and data's fields are nullable.
		fromNoOne: {events.NilUUID, map[string]any{"taskId": nil, "taskName": nil}},
	}
	check := func(what string, n notificationDto) {
		t.Helper()
		if w, ok := want[n.ID]; !ok || n.SenderID != w.sender || !reflect.DeepEqual(n.Data, w.data) {
			t.Fatalf("%s serves %s from %q with data %v; want %+v", what, n.ID, n.SenderID, n.Data, w)
		}
	}
	for range 2 {
		e := st.next()
		if c := e.change(t); e.Name != "notification" || c.Change != "sent" || c.Notification == nil {
			t.Fatalf("stream: %s %s", e.Name, e.Data)
		} else {
			check("the stream", *c.Notification)
		}
	}
	var page notificationPage
	waitFor(t, 10*time.Second, func() error {
		if page = s.page(alice, "?asFlatList=true"); len(page.Items) != 2 {
			return fmt.Errorf("%d notifications listed, want 2", len(page.Items))
		}
		return nil
	})
	for _, n := range page.Items {
		check("the list", n)
	}
	if p := s.page(alice, "?senderId=bob"); len(p.Items) != 1 || p.Items[0].ID != fromBob {
		t.Fatalf("?senderId=bob lists %+v, want bob's old notification", p.Items)
	}

	// res-000 is its UUID everywhere a holiday is served; the resource
	// that names no UUID is in none.
	only := []string{uuidOfRes000}
	if h := waitForHoliday(t, s, alice, people); !slices.Equal(h.resourceIDs(), only) {
		t.Fatalf("the old people holiday: resources %v, want %v", h.resourceIDs(), only)
	}
	global := s.createHoliday(alice, map[string]any{"reason": "NY", "type": "global", "dateFrom": "2027-01-01", "dateTo": "2027-01-01"})
	if !slices.Equal(global.resourceIDs(), only) {
		t.Fatalf("a global holiday created now: resources %v, want %v", global.resourceIDs(), only)
	}
	var renamed holidayDto
	s.call("PUT", "/api/data/holidays/"+people, alice, map[string]any{"reason": "Retreat"}).want(t, 200).decode(t, &renamed)
	if !slices.Equal(renamed.resourceIDs(), only) {
		t.Fatalf("the old people holiday renamed: resources %v, want %v", renamed.resourceIDs(), only)
	}
	now := url.QueryEscape(time.Now().UTC().Format(time.RFC3339Nano))
	for _, id := range []string{people, global.ID} {
		var then holidayDto
		s.call("GET", "/api/data/holidays/"+id+"?asOf="+now, alice, nil).want(t, 200).decode(t, &then)
		if !slices.Equal(then.resourceIDs(), only) {
			t.Fatalf("holiday %s asOf now: resources %v, want %v", id, then.resourceIDs(), only)
		}
	}
	resourceDays := func(filter string) []string {
		t.Helper()
		path := "/api/data/holidays/resource"
		if filter != "" {
			path += "?$filter=" + urlq(filter)
		}
		var days []struct{ ID, Date, ResourceID string }
		s.call("GET", path, alice, nil).want(t, 200).decode(t, &days)
		var out []string
		for _, d := range days {
			out = append(out, d.Date+" "+d.ResourceID)
		}
		return out
	}
	wantDays := []string{"2027-01-01 " + uuidOfRes000, "2027-03-01 " + uuidOfRes000}
	for _, filter := range []string{"", "resourceId eq 'res-000'", "resourceId eq " + uuidOfRes000} {
		if got := resourceDays(filter); !slices.Equal(got, wantDays) {
			t.Fatalf("resource days (%q): %v, want %v", filter, got, wantDays)
		}
	}

	// The history is the audit trail: the event as it was recorded.
	var hist []struct {
		Type string
		Data struct{ ResourceIDs []string }
	}
	s.call("GET", "/api/data/holidays/"+people+"/history", alice, nil).want(t, 200).decode(t, &hist)
	if len(hist) != 2 || hist[0].Type != "HolidayCreated" || !slices.Equal(hist[0].Data.ResourceIDs, []string{"res-000", hex32}) {
		t.Fatalf("history: %+v, want the creation with its resourceIds as recorded", hist)
	}

	// Today's upsert of res-000 changes the old resource; it makes no
	// second one.
	s.call("PUT", "/api/data/resources/res-000", hol, map[string]any{"name": "New", "countryCode": "GB", "isActive": true}).want(t, 200)
	if h := s.holiday(alice, global.ID); !slices.Equal(h.resourceIDs(), only) {
		t.Fatalf("after PUT res-000, the global holiday's resources: %v, want %v", h.resourceIDs(), only)
	}
	if got := resourceDays(""); !slices.Equal(got, wantDays) {
		t.Fatalf("after PUT res-000, resource days: %v, want %v", got, wantDays)
	}

	// A read model an older Astro built holds the old forms, under the
	// versions of the projectors then (notifications 2, holidays 1): a
	// start rebuilds it beside the live one.
	s.stop()
	db, err := sqlx.Open("postgres", s.env["ASTRO_DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`UPDATE notifications SET sender_id = 'bob', data = '{"taskId":42,"marker":"x"}' WHERE id = '` + fromBob + `'`,
		`UPDATE resources SET id = 'res-000' WHERE id = '` + uuidOfRes000 + `'`,
		`UPDATE holidays SET resource_ids = '{res-000}' WHERE id = '` + people + `'`,
		`UPDATE projector_checkpoints SET version = 2 WHERE name = 'notifications'`,
		`UPDATE projector_checkpoints SET version = 1 WHERE name = 'holidays'`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s = startWithEnv(t, s.env)
	// Polled in the database: until the switch, the live read model
	// serves the old forms, which the harness would rightly refuse.
	versions := map[string]int{"notifications": (&projections.Notifications{}).Version(), "holidays": (&projections.Holidays{}).Version()}
	waitFor(t, 60*time.Second, func() error {
		for name, v := range versions {
			var got int
			if err := db.Get(&got, `SELECT version FROM projector_checkpoints WHERE name = $1`, name); err != nil || got != v {
				return fmt.Errorf("%s's read model is of version %d (%v), want %d", name, got, err, v)
			}
		}
		return nil
	})
	for _, n := range s.page(alice, "?asFlatList=true").Items {
		check("the rebuilt list", n)
	}
	if got := resourceDays(""); !slices.Equal(got, wantDays) {
		t.Fatalf("rebuilt resource days: %v, want %v", got, wantDays)
	}

	// A compaction restates the old notifications in today's forms: the
	// events it replaces leave the log, what it writes is written now.
	s.stop()
	env := maps.Clone(s.env)
	env["ASTRO_ERASE_WITHIN"] = "2s"
	s = startWithEnv(t, env)
	s.waitCompacted("alice")
	restated := map[string]bool{}
	for _, e := range s.logEvents(t, "InboxCompacted") {
		p, err := events.Decode(e)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range p.(*events.InboxCompacted).Notifications {
			var data map[string]any
			if err := json.Unmarshal(n.Data, &data); err != nil {
				t.Fatalf("restated data %s: %v", n.Data, err)
			}
			check("the compaction", notificationDto{ID: n.NotificationID, SenderID: n.SenderID, Data: data})
			restated[n.NotificationID] = true
		}
	}
	if !restated[fromBob] || !restated[fromNoOne] {
		t.Fatalf("restated %v, want both old notifications", restated)
	}
	for _, n := range s.page(alice, "?asFlatList=true").Items {
		check("the list after the compaction", n)
	}
}

// TestLegacyNULIsServed: an older Astro took NUL in a notification's texts
// and data's strings, which PostgreSQL cannot store. The projector parked
// the notification, and every compaction restating it, which left the
// inbox due and compacted again at every round, for good. It is served
// with U+FFFD in their place, before and after a compaction.
func TestLegacyNULIsServed(t *testing.T) {
	s := startService(t, func(env map[string]string) { env["ASTRO_ERASE_WITHIN"] = "2s" })
	svc, alice := sender(t, "w1"), token(t, "alice", "w1")
	inbox := events.Aggregate{Kind: events.KindInbox, ID: "alice"}
	id := events.NewID(time.Now())
	appendAsWritten(t, s, "NotificationSent", 1, inbox, 0, `{"notificationId":"`+id+`","recipientId":"alice","senderId":"bob",`+
		`"notificationType":"task","subject":"s\u0000","message":"a\u0000b","data":{"taskName":"t\u0000"},"createDate":"2026-01-01T00:00:00Z"}`)
	s.send(svc, "alice", "bob", "task")
	served := func() error {
		for _, n := range s.page(alice, "?asFlatList=true").Items {
			if n.ID == id {
				if n.Subject != "s\ufffd" || n.Message != "a\ufffdb" || n.Data["taskName"] != "t\ufffd" {
					return fmt.Errorf("served as %q, %q, %v", n.Subject, n.Message, n.Data)
				}
				return nil
			}
		}
		return fmt.Errorf("the notification is not served")
	}
	waitFor(t, 10*time.Second, served)
	s.waitCompacted("alice")
	if err := served(); err != nil {
		t.Fatalf("after the compaction: %v", err)
	}
}

// TestPageAfterADeletedLegacyNotification: a page after a notification an
// older Astro logged with its id in upper case, and the user deleted since,
// is cut where the log had it, as for today's ids. Before, the log was
// searched for the id in lower case only, and the page answered 400 "lastId
// is not one of your notifications" to a client scrolling on.
func TestPageAfterADeletedLegacyNotification(t *testing.T) {
	s := startService(t)
	alice := token(t, "alice", "w1")
	inbox := events.Aggregate{Kind: events.KindInbox, ID: "alice"}
	var at uint64
	var ids []string
	for i := range 3 {
		id := strings.ToUpper(events.NewID(time.Now()))
		ids = append(ids, strings.ToLower(id))
		at = appendAsWritten(t, s, "NotificationSent", 1, inbox, at, fmt.Sprintf(`{"notificationId":"%s","recipientId":"alice","senderId":"bob",`+
			`"notificationType":"task","subject":"s","message":"m","data":{},"createDate":"2026-01-01T00:00:0%dZ"}`, id, i))
	}
	waitFor(t, 10*time.Second, func() error {
		if p := s.page(alice, "?asFlatList=true"); len(p.Items) != 3 {
			return fmt.Errorf("%d of the 3 legacy notifications listed", len(p.Items))
		}
		return nil
	})
	s.call("DELETE", "/api/data/notifications/delete/"+ids[1], alice, nil).want(t, 200)
	if p := s.page(alice, "?asFlatList=true&lastId="+ids[1]); len(p.Items) != 1 || p.Items[0].ID != ids[0] {
		t.Fatalf("the page after the deleted one: %+v, want the oldest, %s", p.Items, ids[0])
	}
}
