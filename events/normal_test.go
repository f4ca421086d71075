package events

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// The UUIDs of TestNameUUID's pinned names.
const (
	uuidOfBob    = "03f5eda1-f39a-50ac-aeb5-1834e4a7bf6c"
	uuidOfRes000 = "99178ac4-be23-5b7d-8d4d-264ca28e8bff"
	uuidOf7      = "a835367d-666a-51a5-9822-32a35a68e7c1"
	uuidOf42     = "cec6663a-faab-5b8a-a9b8-cd31004901ee"
	// hex32 is an id an older Astro took (it matched [A-Za-z0-9_-]{1,64})
	// that names no UUID: a UUID without its hyphens.
	hex32 = "0123456789abcdef0123456789abcdef"
)

// TestNormalData: data an older Astro stored as it came becomes what
// today's send would store, and what today's send stores stays as it is.
func TestNormalData(t *testing.T) {
	const id = "123e4567-e89b-12d3-a456-426614174000"
	for _, tc := range []struct {
		name, data, want string // want "" for none (served as {})
	}{
		{"absent", ``, ``},
		{"null", `null`, ``},
		{"not an object", `[1]`, ``},
		{"empty", `{}`, `{}`},
		{"today's, spaces and all", `{ "taskId" : "` + id + `", "taskName" : null }`, `{ "taskId" : "` + id + `", "taskName" : null }`},
		{"the reviewer's", `{"taskId":42,"marker":"x"}`, `{"taskId":"` + uuidOf42 + `"}`},
		{"uuid fields named", `{"taskId":"bob","projectId":"` + strings.ToUpper(id) + `","assigneeId":7}`,
			`{"taskId":"` + uuidOfBob + `","projectId":"` + id + `","assigneeId":"` + uuidOf7 + `"}`},
		{"uuid field null", `{"assigneeId":null,"x":1}`, `{"assigneeId":null}`},
		{"uuid field unnamed: a fraction", `{"taskId":7.5}`, `{"taskId":null}`},
		{"uuid field unnamed: no UUID", `{"taskId":"` + hex32 + `"}`, `{"taskId":null}`},
		{"uuid field unnamed: an object", `{"projectId":{"id":7}}`, `{"projectId":null}`},
		{"string fields not strings", `{"taskName":7,"fileName":{"a":1},"view":"board","shareId":true}`,
			`{"taskName":null,"fileName":null,"view":"board","shareId":null}`},
		{"names in any case", `{"TaskName":"T","TASKID":7}`, `{"taskName":"T","taskId":"` + uuidOf7 + `"}`},
		{"twice, its own spelling last", `{"TaskName":"a","taskName":"b"}`, `{"taskName":"b"}`},
		{"twice, its own spelling first", `{"taskName":"a","TaskName":"b"}`, `{"taskName":"a"}`},
		{"twice, neither its own spelling", `{"TaskName":"a","TASKNAME":"b"}`, `{"taskName":"a"}`},
		{"only unknown fields", `{"marker":1,"Marker":{"a":[1]}}`, `{}`},
		{"kept values keep their bytes", `{ "taskName" : "a\u00e9 b" , "x" : 1 }`, `{"taskName":"a\u00e9 b"}`},
		// What jsonb refuses: NUL, and a lone surrogate (an older Astro
		// kept data's strings as they came).
		{"NUL in a string", `{"taskName":"a\u0000b","view":"v"}`, "{\"taskName\":\"a\ufffdb\",\"view\":\"v\"}"},
		{"lone surrogate", `{"taskName":"\ud800x <b>"}`, "{\"taskName\":\"\ufffdx <b>\"}"},
		{"a U+FFFD already there, as an escape", `{"taskName":"\ufffd"}`, "{\"taskName\":\"\ufffd\"}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := NormalData(json.RawMessage(tc.data))
			if string(got) != tc.want {
				t.Fatalf("NormalData(%s) = %s, want %s", tc.data, got, tc.want)
			}
			if len(got) > 0 && !json.Valid(got) {
				t.Fatalf("NormalData(%s) = %s: not JSON", tc.data, got)
			}
			if again := NormalData(got); string(again) != string(got) {
				t.Fatalf("NormalData is not idempotent: %s, then %s", got, again)
			}
		})
	}
}

func TestNotificationSentNormal(t *testing.T) {
	const id = "123e4567-e89b-12d3-a456-426614174000"
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		sender, data         string
		wantSender, wantData string
	}{
		{id, `{"taskId":"` + id + `"}`, id, `{"taskId":"` + id + `"}`}, // today's
		{strings.ToUpper(id), ``, id, ``},
		{"bob", `{"taskId":42,"marker":"x"}`, uuidOfBob, `{"taskId":"` + uuidOf42 + `"}`},
		{"res-000", `{}`, uuidOfRes000, `{}`},
		{hex32, ``, NilUUID, ``}, // names no UUID: no sender known
	} {
		p := NotificationSent{NotificationID: id, RecipientID: "alice", SenderID: tc.sender, NotificationType: "task",
			Subject: "s", Message: "m", Data: json.RawMessage(tc.data), CreateDate: at}
		got := p.Normal()
		want := p
		want.SenderID, want.Data = tc.wantSender, json.RawMessage(tc.wantData)
		if got.SenderID != want.SenderID || string(got.Data) != string(want.Data) {
			t.Errorf("sender %q, data %s: Normal gives %q, %s; want %q, %s", tc.sender, tc.data, got.SenderID, got.Data, want.SenderID, want.Data)
		}
		got.Data, want.Data = nil, nil
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Normal changed more than sender and data: %+v, want %+v", got, want)
		}
		if p.SenderID != tc.sender {
			t.Errorf("Normal changed its receiver")
		}
	}
}

func TestInboxCompactedNormal(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	old := []CompactedNotification{
		{NotificationID: NewID(at), SenderID: "bob", NotificationType: "t", Data: json.RawMessage(`{"taskId":7,"marker":1}`), CreateDate: at, ReadDate: &at, Seq: 3},
		{NotificationID: NewID(at), SenderID: hex32, NotificationType: "t", CreateDate: at, Seq: 5},
	}
	p := InboxCompacted{RecipientID: "alice", CompactionID: NewID(at), Part: 1, Parts: 1,
		NotificationIDs: []string{old[0].NotificationID, old[1].NotificationID}, Notifications: slices.Clone(old)}
	got := p.Normal()
	want := []CompactedNotification{old[0], old[1]}
	want[0].SenderID, want[0].Data = uuidOfBob, json.RawMessage(`{"taskId":"`+uuidOf7+`"}`)
	want[1].SenderID = NilUUID
	for i := range want {
		g, w := got.Notifications[i], want[i]
		if g.SenderID != w.SenderID || string(g.Data) != string(w.Data) || g.NotificationID != w.NotificationID ||
			g.ReadDate != w.ReadDate || g.Seq != w.Seq || g.CreateDate != w.CreateDate {
			t.Errorf("notification %d: %+v, want %+v", i, g, w)
		}
	}
	if !slices.Equal(got.NotificationIDs, p.NotificationIDs) || got.CompactionID != p.CompactionID || got.Part != 1 || got.Parts != 1 {
		t.Errorf("Normal changed the part: %+v", got)
	}
	if p.Notifications[0].SenderID != "bob" {
		t.Error("Normal changed its receiver's notifications")
	}
	if empty := (InboxCompacted{Notifications: []CompactedNotification{}}).Normal(); empty.Notifications == nil {
		t.Error("an empty part's notifications became null")
	}
}

func TestHolidayCreatedNormal(t *testing.T) {
	const id = "123e4567-e89b-12d3-a456-426614174000"
	for _, tc := range []struct {
		name      string
		resources []string
		want      []string
	}{
		{"none", nil, nil},
		{"empty", []string{}, []string{}},
		{"today's", []string{id, uuidOfRes000}, []string{id, uuidOfRes000}},
		{"a name", []string{"res-000"}, []string{uuidOfRes000}},
		{"upper-case", []string{strings.ToUpper(id)}, []string{id}},
		{"a name and its UUID are one", []string{"res-000", "r-1", uuidOfRes000}, []string{uuidOfRes000, NameUUID("r-1")}},
		{"one that names no UUID is left out", []string{hex32, "r-1"}, []string{NameUUID("r-1")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := HolidayCreated{HolidayID: id, Reason: "R", Type: HolidayPeople, DateFrom: "2027-01-01", DateTo: "2027-01-01",
				CountryIDs: []string{}, ResourceIDs: slices.Clone(tc.resources)}
			got := p.Normal()
			if !slices.Equal(got.ResourceIDs, tc.want) || (got.ResourceIDs == nil) != (tc.want == nil) {
				t.Fatalf("resourceIds %q become %q, want %q", tc.resources, got.ResourceIDs, tc.want)
			}
			got.ResourceIDs, p.ResourceIDs = nil, nil
			if !reflect.DeepEqual(got, p) {
				t.Fatalf("Normal changed more than the resources: %+v", got)
			}
		})
	}
}

func TestResourceUpsertedNormal(t *testing.T) {
	const id = "123e4567-e89b-12d3-a456-426614174000"
	for _, tc := range []struct{ id, want string }{ // want "" for none
		{id, id},
		{strings.ToUpper(id), id},
		{"res-000", uuidOfRes000},
		{"r_1", NameUUID("r_1")},
		{hex32, ""},
	} {
		p := ResourceUpserted{ResourceID: tc.id, Name: "Ann", CountryCode: "GB", IsActive: true, IsGuest: true}
		got, ok := p.Normal()
		if ok != (tc.want != "") || ok && got.ResourceID != tc.want {
			t.Errorf("%q: Normal gives %q, %v; want %q", tc.id, got.ResourceID, ok, tc.want)
		}
		if got.Name != p.Name || got.CountryCode != p.CountryCode || got.IsActive != p.IsActive || got.IsGuest != p.IsGuest {
			t.Errorf("%q: Normal changed more than the id: %+v", tc.id, got)
		}
	}
}

// TestNormalText: an older Astro took NUL in a notification's texts, which
// PostgreSQL cannot store: the projector parked the notification, and
// every compaction that restated it, for good.
func TestNormalText(t *testing.T) {
	for in, want := range map[string]string{"": "", "plain é": "plain é", "a\x00b\x00": "a\ufffdb\ufffd"} {
		if got := NormalText(in); got != want {
			t.Errorf("NormalText(%q) = %q, want %q", in, got, want)
		}
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sent := NotificationSent{SenderID: NilUUID, NotificationType: "t\x00", Subject: "s\x00", Message: "m\x00", CreateDate: at}.Normal()
	compacted := CompactedNotification{SenderID: NilUUID, NotificationType: "t\x00", Subject: "s\x00", Message: "m\x00", CreateDate: at}.Normal()
	for _, got := range [][3]string{{sent.NotificationType, sent.Subject, sent.Message}, {compacted.NotificationType, compacted.Subject, compacted.Message}} {
		if got != [3]string{"t\ufffd", "s\ufffd", "m\ufffd"} {
			t.Errorf("texts after Normal: %q", got)
		}
	}
}
