package main

import (
	"slices"
	"strings"
	"testing"
)

func TestPendingCapDeletesOldest(t *testing.T) {
	s := startService(t)
	alice := token(t, "alice", "w1")
	svc := sender(t, "w1")
	var first, second string
	for i := range 1002 {
		n := s.send(svc, "alice", "bob", "task")
		switch i {
		case 0:
			first = n.ID
		case 1:
			second = n.ID
		}
	}
	p := s.page(alice, "?asFlatList=true")
	if p.TotalCount != 1000 || p.UnreadCount != 1000 {
		t.Fatalf("after 1002 sends: total %d unread %d, want 1000", p.TotalCount, p.UnreadCount)
	}
	for _, id := range []string{first, second} {
		s.call("DELETE", "/api/data/notifications/delete/"+id, alice, nil).want(t, 404)
	}
	overflow := s.logEvents(t, "NotificationDeleted")
	if len(overflow) != 2 {
		t.Fatalf("%d NotificationDeleted events, want 2", len(overflow))
	}
	for _, e := range overflow {
		if got := string(e.Data); !strings.Contains(got, `"reason":"overflow"`) {
			t.Fatalf("overflow deletion without its reason: %s", got)
		}
	}

	// Paging: 500 newest first, then the rest after the oldest of page one.
	if len(p.Items) != 500 {
		t.Fatalf("page one has %d items, want 500", len(p.Items))
	}
	seen := map[string]bool{}
	for i, it := range p.Items {
		seen[it.ID] = true
		if i > 0 && it.CreateDate.After(p.Items[i-1].CreateDate) {
			t.Fatalf("page not newest first at %d", i)
		}
	}
	p2 := s.page(alice, "?asFlatList=true&lastId="+p.Items[499].ID)
	if len(p2.Items) != 500 {
		t.Fatalf("page two has %d items, want 500", len(p2.Items))
	}
	for _, it := range p2.Items {
		if seen[it.ID] {
			t.Fatalf("notification %s on both pages", it.ID)
		}
	}
	p3 := s.page(alice, "?asFlatList=true&lastId="+p2.Items[499].ID)
	if len(p3.Items) != 0 {
		t.Fatalf("page three has %d items, want none", len(p3.Items))
	}
}

func TestRetrieveGroupsAndFilters(t *testing.T) {
	s := startService(t)
	alice := token(t, "alice", "w1")
	svc := sender(t, "w1")
	s.send(svc, "alice", "bob", "task")
	s.send(svc, "alice", "carol", "comment")
	s.send(svc, "alice", "bob", "task")
	newest := s.send(svc, "alice", "bob", "mention")
	s.send(svc, "alice", "dave", "report,weekly") // a type a send takes

	grouped := s.page(alice, "")
	if len(grouped.Items) != 3 {
		t.Fatalf("grouped into %d, want 3 (dave's one, bob's three, carol's one): %+v", len(grouped.Items), grouped.Items)
	}
	grouped.Items = grouped.Items[1:]
	parent := grouped.Items[0]
	if parent.ID != newest.ID || len(parent.Children) != 2 {
		t.Fatalf("bob's group: parent %s with %d children, want %s with 2", parent.ID, len(parent.Children), newest.ID)
	}
	if grouped.Items[1].Children != nil {
		t.Fatalf("carol's single notification has children %+v", grouped.Items[1].Children)
	}
	if grouped.TotalCount != 5 || grouped.UnreadCount != 5 {
		t.Fatalf("counts %d/%d", grouped.TotalCount, grouped.UnreadCount)
	}

	cases := []struct {
		query string
		want  int
	}{
		{"?asFlatList=true", 5},
		{"?asFlatList=true&notificationTypes=report%2Cweekly", 1},
		{"?asFlatList=true&notificationTypes=report,weekly&notificationTypes=task", 3},
		{"?asFlatList=true&notificationTypes=report", 0},
		{"?asFlatList=true&senderId=" + idOf("carol"), 1},
		{"?asFlatList=true&notificationTypes=task", 2},
		{"?asFlatList=true&notificationTypes=task,mention", 3},
		{"?asFlatList=true&notificationTypes=task&notificationTypes=comment", 3},
		{"?asFlatList=TRUE&senderId=" + strings.ToUpper(idOf("bob")) + "&notificationTypes=mention", 1},
		{"?asFlatList=true&senderId=" + idOf("nobody"), 0},
		// Parameter names in any case: none is ignored.
		{"?AsFlatList=true&SENDERID=" + idOf("carol"), 1},
		{"?asflatlist=true&NotificationTypes=task,mention", 3},
	}
	for _, c := range cases {
		if got := len(s.page(alice, c.query).Items); got != c.want {
			t.Errorf("%s: %d items, want %d", c.query, got, c.want)
		}
	}
}

// A client that scrolls on after deleting the oldest notification it
// shows asks for the page after a notification that is gone: it gets
// that page, where it was told "lastId is not one of your notifications";
// and after a compaction too, while the compaction still names it. Another
// user's notification, or none, is still refused alike.
func TestPageAfterADeletedNotification(t *testing.T) {
	s := startService(t)
	alice, bob := token(t, "alice", "w1"), token(t, "bob", "w1")
	svc := sender(t, "w1")
	var ids []string
	for range 4 {
		ids = append(ids, s.send(svc, "alice", "carol", "task").ID) // oldest first
	}
	bobs := s.send(svc, "bob", "carol", "task").ID
	s.call("DELETE", "/api/data/notifications/delete/"+ids[2], alice, nil).want(t, 200)

	after := func(id string) []string {
		t.Helper()
		var out []string
		for _, it := range s.page(alice, "?asFlatList=true&lastId="+id).Items {
			out = append(out, it.ID)
		}
		return out
	}
	if got, want := after(ids[2]), []string{ids[1], ids[0]}; !slices.Equal(got, want) {
		t.Fatalf("the page after a deleted notification: %v, want %v", got, want)
	}
	if got, want := after(strings.ToUpper(ids[2])), []string{ids[1], ids[0]}; !slices.Equal(got, want) {
		t.Fatalf("the page after a deleted notification, its id upper-cased: %v, want %v", got, want)
	}
	for _, id := range []string{bobs, idOf("never-sent")} {
		s.call("GET", "/api/data/notifications?lastId="+id, alice, nil).want(t, 400)
	}
	s.call("GET", "/api/data/notifications?lastId="+bobs, bob, nil).want(t, 200)

	// After a compaction, which restates the pending notifications and
	// erases their NotificationSent: one deleted since is found there.
	s = startService(t, func(env map[string]string) { env["ASTRO_ERASE_WITHIN"] = "2s" })
	older, newer := s.send(svc, "alice", "carol", "task").ID, s.send(svc, "alice", "carol", "task").ID
	s.waitCompacted("alice")
	s.call("DELETE", "/api/data/notifications/delete/"+newer, alice, nil).want(t, 200)
	if got := after(newer); !slices.Equal(got, []string{older}) {
		t.Fatalf("the page after a notification deleted after a compaction: %v, want [%s]", got, older)
	}
}
