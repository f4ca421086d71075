package main

import (
	"bytes"
	"net/url"
	"strings"
	"testing"
)

// The name-based UUIDs (RFC 9562 version 5, namespace
// events.NameNamespace) of the ids the shared load generator sends; pinned
// by events' TestNameUUID, computed there by another implementation.
const (
	uuidOfBob    = "03f5eda1-f39a-50ac-aeb5-1834e4a7bf6c"
	uuidOf7      = "a835367d-666a-51a5-9822-32a35a68e7c1"
	uuidOfRes000 = "99178ac4-be23-5b7d-8d4d-264ca28e8bff"
)

// TestSendNamesUpstreamIDsEndToEnd sends exactly what the shared load
// generator (../shared/perf/load) sends: a sender "bob", data.taskId 7 and
// a resource res-000, where the public document types each as uuid. Each
// was refused with 400 and the tool stopped at its first fixture. Astro is
// liberal in what it takes and exact in what it sends: every such id is
// named by its name-based UUID where the request enters, and the answers,
// the lists and the events carry only the UUID (the harness holds every
// answer to both documents, formats included).
func TestSendNamesUpstreamIDsEndToEnd(t *testing.T) {
	s := startService(t)
	svc := sender(t, "w1")
	hol := token(t, "svc-hol", "w1", "resources:write")
	alice := token(t, "alice", "w1")

	var n notificationDto
	s.call("POST", sendPath, svc, `{"recipientId":"alice","senderId":"bob","notificationType":"task.assigned","subject":"New task","message":"Bob assigned you task 7","data":{"taskId":7}}`).
		want(t, 200).decode(t, &n)
	if n.ID == "" || n.SenderID != uuidOfBob || n.Data["taskId"] != uuidOf7 {
		t.Fatalf("the send answered sender %q, data %v; want sender %s, taskId %s", n.SenderID, n.Data, uuidOfBob, uuidOf7)
	}
	for _, tc := range []struct {
		query string
		found bool
	}{
		{"?senderId=bob", true},
		{"?senderId=" + uuidOfBob, true},
		{"?senderId=" + strings.ToUpper(uuidOfBob), true},
		{"?senderId=Bob", false}, // names are case-sensitive
		{"", true},
	} {
		p := s.page(alice, tc.query)
		if found := len(p.Items) == 1 && p.Items[0].ID == n.ID; found != tc.found || len(p.Items) > 1 {
			t.Fatalf("list%s: %d items %+v, want the notification: %v", tc.query, len(p.Items), p.Items, tc.found)
		}
		if tc.found && (p.Items[0].SenderID != uuidOfBob || p.Items[0].Data["taskId"] != uuidOf7) {
			t.Fatalf("list%s serves %+v", tc.query, p.Items[0])
		}
	}
	sent := s.logEvents(t, "NotificationSent")
	if len(sent) != 1 || !bytes.Contains(sent[0].Data, []byte(`"senderId":"`+uuidOfBob+`"`)) ||
		!bytes.Contains(sent[0].Data, []byte(`{"taskId":"`+uuidOf7+`"}`)) || bytes.Contains(sent[0].Data, []byte(`"bob"`)) {
		t.Fatalf("the event holds other than the UUIDs: %+v", sent)
	}

	// The load generator's first resource; the same resource by its UUID
	// (in either case) is the same aggregate, so an identical upsert
	// appends nothing.
	const resource = `{"name":"Person 0","countryCode":"GB","isActive":true,"isGuest":true}`
	var r struct {
		ID, Name          string
		IsActive, IsGuest bool
	}
	s.call("PUT", "/api/data/resources/res-000", hol, resource).want(t, 200).decode(t, &r)
	if r.ID != uuidOfRes000 || r.Name != "Person 0" || !r.IsGuest {
		t.Fatalf("PUT res-000 answered %+v, want id %s", r, uuidOfRes000)
	}
	s.call("PUT", "/api/data/resources/"+strings.ToUpper(uuidOfRes000), hol, resource).want(t, 200)
	if upserts := s.logEvents(t, "ResourceUpserted"); len(upserts) != 1 || !bytes.Contains(upserts[0].Data, []byte(`"resourceId":"`+uuidOfRes000+`"`)) {
		t.Fatalf("ResourceUpserted: %+v, want one, of %s", upserts, uuidOfRes000)
	}

	// A people holiday names res-000 as its upsert did: as a string and as
	// an object, both the same resource.
	for day, resources := range map[string]any{
		"2027-03-01": []string{"res-000"},
		"2027-03-02": []any{map[string]string{"id": "res-000"}, uuidOfRes000},
	} {
		h := s.createHoliday(hol, map[string]any{"reason": "Offsite", "type": "people", "dateFrom": day, "dateTo": day, "resources": resources})
		if got := h.resourceIDs(); len(got) != 1 || got[0] != uuidOfRes000 {
			t.Fatalf("people holiday of %v: resources %v, want [%s]", resources, got, uuidOfRes000)
		}
	}
	type resourceDay struct{ ID, Date, ResourceID string }
	for _, tc := range []struct {
		filter string
		days   int
	}{
		{"", 2},
		{"resourceId eq 'res-000'", 2},
		{"resourceId eq '" + strings.ToUpper(uuidOfRes000) + "'", 2},
		{"resourceId eq " + uuidOfRes000, 2}, // OData v4's guid literal, unquoted
		{"resourceId eq " + strings.ToUpper(uuidOfRes000), 2},
		{"resourceId ne " + uuidOfRes000, 0},
		{"resourceId ne 'res-000'", 0},
		{"resourceId eq 'res-001'", 0},
		{"resourceId eq 'RES-000'", 0},
	} {
		path := "/api/data/holidays/resource"
		if tc.filter != "" {
			path += "?$filter=" + url.QueryEscape(tc.filter)
		}
		var days []resourceDay
		s.call("GET", path, alice, nil).want(t, 200).decode(t, &days)
		if len(days) != tc.days {
			t.Fatalf("%s: %d days %+v, want %d", path, len(days), days, tc.days)
		}
		for _, d := range days {
			if d.ResourceID != uuidOfRes000 {
				t.Fatalf("%s serves resource %q, want %s", path, d.ResourceID, uuidOfRes000)
			}
		}
	}
}

// TestRefusedUpstreamIDs: what cannot be named answers 400 with its field,
// and appends nothing. Ids Astro issued itself (holidays, notifications)
// stay UUIDs.
func TestRefusedUpstreamIDs(t *testing.T) {
	s := startService(t)
	hol := token(t, "svc-hol", "w1", "resources:write")
	const resource = `{"name":"Person","countryCode":"GB","isActive":true}`
	for _, tc := range []struct{ name, method, path, body, field string }{
		{"resource with a space before", "PUT", "/api/data/resources/%20res-000", resource, "id"},
		{"resource with a space after", "PUT", "/api/data/resources/res-000%20", resource, "id"},
		{"resource with a control character", "PUT", "/api/data/resources/res%09000", resource, "id"},
		{"resource a uuid in braces", "PUT", "/api/data/resources/%7B" + uuidOfRes000 + "%7D", resource, "id"},
		{"resource a uuid as a urn", "PUT", "/api/data/resources/urn:uuid:" + uuidOfRes000, resource, "id"},
		{"resource a uuid without hyphens", "PUT", "/api/data/resources/" + strings.ReplaceAll(uuidOfRes000, "-", ""), resource, "id"},
		{"resource too long", "PUT", "/api/data/resources/" + strings.Repeat("r", 201), resource, "id"},
		{"people holiday naming a resource with a control character", "POST", "/api/data/holidays",
			`{"reason":"Off","type":"people","dateFrom":"2027-03-01","dateTo":"2027-03-01","resources":["res\t000"]}`, "resources"},
		{"people holiday naming a resource too long", "POST", "/api/data/holidays",
			`{"reason":"Off","type":"people","dateFrom":"2027-03-01","dateTo":"2027-03-01","resources":["` + strings.Repeat("r", 201) + `"]}`, "resources"},
		{"people holiday naming a resource by an empty id", "POST", "/api/data/holidays",
			`{"reason":"Off","type":"people","dateFrom":"2027-03-01","dateTo":"2027-03-01","resources":[""]}`, "resources"},
		{"holiday id", "GET", "/api/data/holidays/res-000", "", "id"},
		{"holiday rename id", "PUT", "/api/data/holidays/holiday-1", `{"reason":"x"}`, "id"},
		{"notification id", "DELETE", "/api/data/notifications/delete/n-1", "", "id"},
		// A filter refuses what a write refuses, rather than find nothing.
		{"sender filter with a space after", "GET", "/api/data/notifications?senderId=bob%20", "", "senderId"},
		{"sender filter a uuid in braces", "GET", "/api/data/notifications?senderId=%7B" + uuidOfBob + "%7D", "", "senderId"},
		{"sender filter a uuid as a urn", "GET", "/api/data/notifications?senderId=urn:uuid:" + uuidOfBob, "", "senderId"},
		{"resource filter a uuid in braces", "GET", "/api/data/holidays/resource?$filter=" + url.QueryEscape("resourceId eq '{"+uuidOfRes000+"}'"), "", "$filter"},
		{"resource filter a uuid without hyphens", "GET", "/api/data/holidays/resource?$filter=" + url.QueryEscape("resourceId ne '"+strings.ReplaceAll(uuidOfRes000, "-", "")+"'"), "", "$filter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body any
			if tc.body != "" {
				body = tc.body
			}
			env := s.call(tc.method, tc.path, hol, body).want(t, 400)
			if len(env.Error.ValidationErrors[tc.field]) == 0 {
				t.Fatalf("no validationErrors.%s: %s", tc.field, env.raw)
			}
		})
	}
	if appended := s.logEvents(t); len(appended) != 0 {
		t.Fatalf("refused requests appended %+v", appended)
	}
}
