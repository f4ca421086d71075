package main

import (
	"net/url"
	"testing"
)

// TestNestedQueryParameters: the public TypeScript SDK sends its options
// nested, params[asFlatList]=true, and arrays with brackets; before, Astro
// read none of them (a flat list came back grouped).
func TestNestedQueryParameters(t *testing.T) {
	s := startService(t)
	alice := token(t, "alice", "w1")
	svc := sender(t, "w1")
	s.send(svc, "alice", "bob", "task")
	s.send(svc, "alice", "bob", "comment")
	if p := s.page(alice, ""); len(p.Items) != 1 {
		t.Fatalf("grouped page: %d items, want 1 (a parent and its child)", len(p.Items))
	}
	for _, q := range []string{
		"?params[asFlatList]=true",
		"?params%5BasFlatList%5D=true",
	} {
		if p := s.page(alice, q); len(p.Items) != 2 {
			t.Fatalf("%s: %d items, want the flat list of 2", q, len(p.Items))
		}
	}
	for _, q := range []string{
		"?params[asFlatList]=true&params[notificationTypes][]=comment",
		"?params[asFlatList]=true&params[notificationTypes][0]=comment",
		"?asFlatList=true&notificationTypes[]=comment",
	} {
		if p := s.page(alice, q); len(p.Items) != 1 || p.Items[0].NotificationType != "comment" {
			t.Fatalf("%s: %+v, want the one comment", q, p.Items)
		}
	}

	hr := token(t, "hr", "w1", "resources:write")
	s.upsertResource(hr, "r-1", "GB", true, false)
	s.createHoliday(alice, map[string]any{"reason": "Two days", "type": "global", "dateFrom": "2027-01-01", "dateTo": "2027-01-02"})
	var days []struct{ Date string }
	q := url.Values{"params[$top]": {"1"}, "params[$orderby]": {"date desc"}}
	s.call("GET", "/api/data/holidays/global?"+q.Encode(), alice, nil).want(t, 200).decode(t, &days)
	if len(days) != 1 || days[0].Date != "2027-01-02" {
		t.Fatalf("global list with params[$top] and params[$orderby]: %+v", days)
	}
	q = url.Values{"params[$filter]": {"date eq 2027-01-01"}}
	days = nil
	s.call("GET", "/api/data/holidays/global?"+q.Encode(), alice, nil).want(t, 200).decode(t, &days)
	if len(days) != 1 || days[0].Date != "2027-01-01" {
		t.Fatalf("global list with params[$filter]: %+v", days)
	}
}
