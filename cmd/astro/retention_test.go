package main

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"astro/events"
	"astro/events/natstest"
)

// A deleted notification's content leaves every file of the log within the
// erasure bound, by compaction, with no request asking for it; the holiday
// history of the same workspace stays whole; the read model the compacted
// log rebuilds is the live one.
func TestDeletedContentLeavesTheLogWithinTheBound(t *testing.T) {
	s := startService(t, func(env map[string]string) { env["ASTRO_ERASE_WITHIN"] = "2s" })
	svc, alice := sender(t, "w1"), token(t, "alice", "w1")
	marker := events.NewID(time.Now())
	deleted, kept := "DELETED-"+marker, "KEPT-"+marker
	sendNote := func(subject string) notificationDto {
		var n notificationDto
		s.call("POST", sendPath, svc, map[string]any{
			"recipientId": "alice", "senderId": idOf("svc"), "notificationType": "task", "subject": subject, "message": subject + " message",
		}).want(t, 200).decode(t, &n)
		return n
	}
	var h struct{ ID string }
	s.call("POST", "/api/data/holidays", alice, map[string]any{"reason": "OLD-NAME-" + marker, "type": "global", "dateFrom": "2027-05-01", "dateTo": "2027-05-02"}).want(t, 200).decode(t, &h)
	s.call("PUT", "/api/data/holidays/"+h.ID, alice, map[string]any{"reason": "NEW-NAME-" + marker}).want(t, 200)
	gone := sendNote(deleted)
	sendNote(kept)
	for range 3 {
		s.send(svc, "alice", "bob", "task")
	}
	s.call("POST", "/api/data/notifications/"+gone.ID+"/markread", alice, nil).want(t, 200)
	s.call("DELETE", "/api/data/notifications/delete/"+gone.ID, alice, nil).want(t, 200)
	if len(natstest.FilesWith(t, s.natsDir, deleted)) == 0 {
		t.Fatal("the deleted notification is in no file before compaction: the search finds nothing")
	}

	waitFor(t, 30*time.Second, func() error {
		if found := natstest.FilesWith(t, s.natsDir, deleted); len(found) > 0 {
			return fmt.Errorf("the deleted notification's content is still in %v", found)
		}
		return nil
	})
	// The compaction erases what carries content first, then purges the
	// rest: it is done when the inbox's history starts with it.
	s.waitCompacted("alice")

	// What is pending is all there.
	if p := s.page(alice, "?asFlatList=true"); p.TotalCount != 4 || len(p.Items) != 4 || p.UnreadCount != 4 {
		t.Fatalf("after compaction: %d of %d, %d unread, want 4 of 4, 4 unread", len(p.Items), p.TotalCount, p.UnreadCount)
	}
	if len(natstest.FilesWith(t, s.natsDir, kept)) == 0 {
		t.Fatal("a pending notification's content left the log")
	}

	// The audit history of the workspace is whole, in the log and served.
	var hist []historyEntry
	s.call("GET", "/api/data/holidays/"+h.ID+"/history", alice, nil).want(t, 200).decode(t, &hist)
	if len(hist) != 2 {
		t.Fatalf("holiday history: %+v, want created and renamed", hist)
	}
	for _, name := range []string{"OLD-NAME-" + marker, "NEW-NAME-" + marker} {
		if len(natstest.FilesWith(t, s.natsDir, name)) == 0 {
			t.Fatalf("holiday name %s left the log", name)
		}
	}

	// The compacted log rebuilds exactly the read model that saw the whole
	// history.
	out, err := astroCommand(t, s.env, "projections", "rebuild", "notifications")
	if err != nil || !strings.Contains(out, "switched notifications to the rebuilt read model") {
		t.Fatalf("rebuild from the compacted log: %v\n%s", err, out)
	}
}

// Erasure on request, over HTTP and as a command: a user's notifications,
// then a whole workspace, each leaving one event and no content, and
// nothing of anyone else touched.
func TestErasureOnRequest(t *testing.T) {
	s := startService(t)
	svc, dpo := sender(t, "w1"), token(t, "dpo", "w1", "data:erase")
	alice, bob := token(t, "alice", "w1"), token(t, "bob", "w1")
	marker := events.NewID(time.Now())
	note := func(to, subject string) {
		s.call("POST", sendPath, svc, map[string]any{
			"recipientId": to, "senderId": idOf("svc"), "notificationType": "task", "subject": subject, "message": "m",
		}).want(t, 200)
	}
	note("alice", "ALICE-"+marker)
	note("alice", "ALICE-"+marker)
	note("bob", "BOB-"+marker)
	var h1, h2 struct{ ID string }
	s.call("POST", "/api/data/holidays", alice, map[string]any{"reason": "W1-HOLIDAY-" + marker, "type": "global", "dateFrom": "2027-05-01", "dateTo": "2027-05-02"}).want(t, 200).decode(t, &h1)
	w2 := token(t, "carol", "w2")
	s.call("POST", "/api/data/holidays", w2, map[string]any{"reason": "W2-HOLIDAY-" + marker, "type": "global", "dateFrom": "2027-05-01", "dateTo": "2027-05-02"}).want(t, 200).decode(t, &h2)
	s.call("PUT", "/api/data/holidays/"+h2.ID, w2, map[string]any{"reason": "W2-RENAMED-" + marker}).want(t, 200)

	// Without the privilege: refused, nothing erased.
	s.call("POST", "/api/data/erasure/users/alice", alice, nil).want(t, 403)
	s.call("POST", "/api/data/erasure/users/not.a.user", dpo, nil).want(t, 400)

	var r struct {
		ErasureID, Scope, WorkspaceID, UserID, RequestedBy  string
		Notifications, Inboxes, Holidays, Resources, Events int
	}
	s.call("POST", "/api/data/erasure/users/alice", dpo, nil).want(t, 200).decode(t, &r)
	if r.Scope != "user" || r.UserID != "alice" || r.WorkspaceID != "w1" || r.RequestedBy != "dpo" || r.Notifications != 2 || r.Events != 2 || !events.ValidUUID(r.ErasureID) {
		t.Fatalf("receipt: %+v", r)
	}
	waitFor(t, 10*time.Second, func() error {
		if p := s.page(alice, "?asFlatList=true"); p.TotalCount != 0 || len(p.Items) != 0 {
			return fmt.Errorf("alice still has %d notifications", p.TotalCount)
		}
		return nil
	})
	if p := s.page(bob, "?asFlatList=true"); p.TotalCount != 1 {
		t.Fatalf("bob has %d notifications, want 1", p.TotalCount)
	}
	if found := natstest.FilesWith(t, s.natsDir, "ALICE-"+marker); len(found) > 0 {
		t.Fatalf("alice's erased notifications are still in %v", found)
	}

	// The workspace, as a command.
	out, err := astroCommand(t, s.env, "erase", "workspace", "--workspace", "w1", "--by", "offboarding-ticket-42")
	if err != nil || !strings.Contains(out, `"scope": "workspace"`) || !strings.Contains(out, `"holidays": 1`) || !strings.Contains(out, `"inboxes": 2`) {
		t.Fatalf("astro erase workspace: %v\n%s", err, out)
	}
	waitFor(t, 10*time.Second, func() error {
		if a := s.call("GET", "/api/data/holidays/"+h1.ID, alice, nil); a.Status != 404 {
			return fmt.Errorf("w1's holiday answers %d", a.Status)
		}
		if p := s.page(bob, "?asFlatList=true"); p.TotalCount != 0 {
			return fmt.Errorf("bob still has %d notifications", p.TotalCount)
		}
		return nil
	})
	for _, m := range []string{"W1-HOLIDAY-" + marker, "BOB-" + marker} {
		if found := natstest.FilesWith(t, s.natsDir, m); len(found) > 0 {
			t.Fatalf("erased %s is still in %v", m, found)
		}
	}
	// What w1 keeps in the log: its erasure, and an InboxErased per inbox.
	var w1 []string
	for _, e := range s.logEvents(t) {
		if e.WorkspaceID == "w1" && e.Aggregate.Kind != events.KindInbox {
			w1 = append(w1, e.Type+" by "+e.ActorID)
		}
	}
	if len(w1) != 1 || w1[0] != "WorkspaceErased by offboarding-ticket-42" {
		t.Fatalf("w1's history: %v, want one WorkspaceErased", w1)
	}

	// w2 is untouched: its holiday and the audit of its rename.
	var hist []historyEntry
	s.call("GET", "/api/data/holidays/"+h2.ID+"/history", w2, nil).want(t, 200).decode(t, &hist)
	if len(hist) != 2 || len(natstest.FilesWith(t, s.natsDir, "W2-RENAMED-"+marker)) == 0 {
		t.Fatalf("w2's history after w1's erasure: %+v", hist)
	}
	// The instance's cached copy of the erased holiday is not trusted: the
	// holiday is gone for commands too.
	s.call("PUT", "/api/data/holidays/"+h1.ID, alice, map[string]any{"reason": "back?"}).want(t, 404)
	// And w1 lives on: a new holiday is a new history.
	s.call("POST", "/api/data/holidays", alice, map[string]any{"reason": "after", "type": "global", "dateFrom": "2027-06-01", "dateTo": "2027-06-02"}).want(t, 200)
}

// A holiday read after a workspace's erasure was answered shows none of
// the workspace's holidays, however far behind the holidays projector is:
// it waits for the projector to apply the erasure, as after any write. So
// does a create, whose budget counts the workspace's holidays and whose
// answer lists its resources: the erasure left their subjects empty, which
// alone would let it read what the erasure removed.
func TestHolidayReadsAfterAWorkspaceErasure(t *testing.T) {
	s := startService(t)
	alice, dpo := token(t, "alice", "w1"), token(t, "dpo", "w1", "data:erase")
	s.upsertResource(token(t, "hr-sync", "w1", "resources:write"), "ERASED-RESOURCE", "GB", true, false)
	var h struct{ ID string }
	s.call("POST", "/api/data/holidays", alice, map[string]any{"reason": "ERASED-HOLIDAY", "type": "global", "dateFrom": "2027-05-01", "dateTo": "2027-05-02"}).want(t, 200).decode(t, &h)
	s.call("GET", "/api/data/holidays/"+h.ID, alice, nil).want(t, 200) // in the read model

	release := holdTable(t, s.env["ASTRO_DATABASE_URL"], "holidays")
	s.call("POST", "/api/data/erasure/workspace", dpo, nil).want(t, 200)

	create := map[string]any{"reason": "after", "type": "global", "dateFrom": "2027-06-01", "dateTo": "2027-06-02"}
	requests := []struct {
		method, path string
		body         any
	}{
		{"GET", "/api/data/holidays/global", nil},
		{"GET", "/api/data/holidays/" + h.ID, nil},
		{"POST", "/api/data/holidays", create},
	}
	answers := make([]envelope, len(requests))
	var wg sync.WaitGroup
	for i, q := range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = s.callRaw(t, q.method, q.path, alice, q.body)
		}()
	}
	wg.Wait()
	for i, q := range requests {
		if a := answers[i]; a.Status != 503 || a.Header.Get("Retry-After") == "" {
			t.Errorf("%s %s while the projector is behind the erasure: %d, want 503 with Retry-After (the read model still has the workspace's data): %s", q.method, q.path, a.Status, a.raw)
		}
	}

	release()
	if list := s.call("GET", requests[0].path, alice, nil).want(t, 200); strings.Contains(string(list.Data), "ERASED-HOLIDAY") {
		t.Fatalf("the erased workspace's list: %s", list.Data)
	}
	s.call("GET", requests[1].path, alice, nil).want(t, 404)
	var after struct{ Resources []struct{ ID string } }
	s.call("POST", "/api/data/holidays", alice, create).want(t, 200).decode(t, &after)
	if len(after.Resources) != 0 {
		t.Fatalf("a holiday created after the erasure applies to the erased resources: %+v", after.Resources)
	}
}

// Two instances asked to erase one user at once both answer with a
// receipt: they delete the same events, and the second delete of one
// failed (the server's "sequence not found"), so one of them answered
// 500.
func TestTwoInstancesEraseOneUserAtOnce(t *testing.T) {
	a := startService(t)
	env := maps.Clone(a.env)
	env["ASTRO_DATA_DIR"] = t.TempDir()
	b := startWithEnv(t, env)
	svc, dpo := sender(t, "w1"), token(t, "dpo", "w1", "data:erase")
	for round := range 3 {
		for range 30 {
			a.send(svc, "carol", "bob", "task")
		}
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		for _, s := range []*service{a, b} {
			wg.Go(func() {
				req, _ := http.NewRequest("POST", s.base+"/api/data/erasure/users/carol", nil)
				req.Header.Set("Authorization", "Bearer "+dpo)
				resp, err := s.client.Do(req)
				if err != nil {
					errs <- err
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					errs <- fmt.Errorf("round %d: HTTP %d: %s", round, resp.StatusCode, body)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
}
