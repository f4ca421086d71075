package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"astro/events"
)

// statusOf sends a request without failing the test on its status.
func (s *service) statusOf(method, path, tok string) int {
	s.t.Helper()
	req, _ := http.NewRequest(method, s.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Error(err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Racing conflicting commands end in a state that a serial order of the
// acknowledged ones explains: the log's order.
func TestRacingCommandsAreSerializable(t *testing.T) {
	s := startService(t)
	alice := token(t, "alice", "w1")
	svc := sender(t, "w1")

	// The same notification deleted and marked read at once: either the
	// read came first (both 200) or the delete did (read 404). Never a
	// read of a deleted notification, never a lost delete.
	for range 15 {
		n := s.send(svc, "alice", "bob", "race")
		var del, read int
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); del = s.statusOf("DELETE", "/api/data/notifications/delete/"+n.ID, alice) }()
		go func() { defer wg.Done(); read = s.statusOf("POST", "/api/data/notifications/"+n.ID+"/markread", alice) }()
		wg.Wait()
		if del != 200 || (read != 200 && read != 404) {
			t.Fatalf("delete %d, markread %d", del, read)
		}
	}
	if p := s.page(alice, "?asFlatList=true"); len(p.Items) != 0 {
		t.Fatalf("%d notifications survived their deletes", len(p.Items))
	}

	// markallread racing sends: a notification is read exactly when the
	// log puts it before a read-all that lists it.
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%5 == 0 {
				if st := s.statusOf("POST", "/api/data/notifications/markallread", alice); st != 200 {
					t.Errorf("markallread: %d", st)
				}
				return
			}
			s.send(svc, "alice", "bob", fmt.Sprint("t", i))
		}()
	}
	wg.Wait()
	sentAt := map[string]uint64{}
	readBy := map[string]uint64{}
	for _, e := range s.logEvents(t, "NotificationSent", "AllNotificationsRead") {
		switch e.Type {
		case "NotificationSent":
			var p events.NotificationSent
			json.Unmarshal(e.Data, &p)
			if p.NotificationType != "race" {
				sentAt[p.NotificationID] = e.Seq
			}
		case "AllNotificationsRead":
			var p events.AllNotificationsRead
			json.Unmarshal(e.Data, &p)
			for _, id := range p.NotificationIDs {
				if _, ok := readBy[id]; !ok {
					readBy[id] = e.Seq
				}
			}
		}
	}
	page := s.page(alice, "?asFlatList=true")
	if len(page.Items) != 16 {
		t.Fatalf("%d notifications, want 16", len(page.Items))
	}
	for _, it := range page.Items {
		readSeq, listed := readBy[it.ID]
		if listed && readSeq < sentAt[it.ID] {
			t.Fatalf("notification %s read by an event before it was sent", it.ID)
		}
		if (it.ReadDate != nil) != listed {
			t.Fatalf("notification %s: read %v, but listed by a read-all: %v", it.ID, it.ReadDate != nil, listed)
		}
	}
}
