package main

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"astro/api/natscmd"
)

func TestIdempotencyKey(t *testing.T) {
	s := startService(t)
	svc := sender(t, "w1")
	alice := token(t, "alice", "w1")
	body := map[string]any{"recipientId": "alice", "senderId": "0000b0b0-0000-4000-8000-000000000001", "notificationType": "task", "subject": "once"}

	first := s.call("POST", sendPath, svc, body, "Idempotency-Key", "send-1").want(t, 200)
	again := s.call("POST", sendPath, svc, body, "Idempotency-Key", "send-1").want(t, 200)
	if string(again.Data) != string(first.Data) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry answered differently:\n%s\n%s", first.Data, again.Data)
	}
	// The replay gives the write's log position too: a client that reads
	// at it (X-Astro-Min-Position) after a retry reads its write.
	if pos := first.Header.Get("X-Astro-Position"); pos == "" || again.Header.Get("X-Astro-Position") != pos {
		t.Fatalf("X-Astro-Position %q, replayed %q", pos, again.Header.Get("X-Astro-Position"))
	}
	if n := len(s.logEvents(t, "NotificationSent")); n != 1 {
		t.Fatalf("%d NotificationSent after a retried send, want 1", n)
	}
	// A token refreshed meanwhile, its privileges in another order, asks
	// the same: a replay, not 422.
	refreshed := token(t, "svc-tasks", "w1", "resources:write", "notifications:send")
	s.call("POST", sendPath, token(t, "svc-tasks", "w1", "notifications:send", "resources:write"), body, "Idempotency-Key", "send-2").want(t, 200)
	if r := s.call("POST", sendPath, refreshed, body, "Idempotency-Key", "send-2").want(t, 200); r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("a retry with the same privileges in another order was not a replay")
	}
	other := map[string]any{"recipientId": "alice", "senderId": "0000b0b0-0000-4000-8000-000000000001", "notificationType": "task", "subject": "changed"}
	s.call("POST", sendPath, svc, other, "Idempotency-Key", "send-1").want(t, 422)
	// Keys belong to their caller: another user may use the same key.
	s.call("POST", "/api/data/notifications/markallread", alice, nil, "Idempotency-Key", "send-1").want(t, 200)

	// A replayed delete answers 200 again, not 404.
	var n notificationDto
	first.decode(t, &n)
	for range 2 {
		s.call("DELETE", "/api/data/notifications/delete/"+n.ID, alice, nil, "Idempotency-Key", "del-1").want(t, 200)
	}
	s.call("DELETE", "/api/data/notifications/delete/"+n.ID, alice, nil, "Idempotency-Key", "del-2").want(t, 404)

	s.call("POST", sendPath, svc, body, "Idempotency-Key", strings.Repeat("k", 256)).want(t, 400)
	// Sent empty, a key is refused too: executed without one, its retries
	// would run again in silence.
	if env := s.call("POST", sendPath, svc, body, "Idempotency-Key", "").want(t, 400); len(env.Error.ValidationErrors["Idempotency-Key"]) == 0 {
		t.Fatalf("an empty key: %s", env.raw)
	}
}

func TestConcurrentRetriesExecuteOnce(t *testing.T) {
	s := startService(t)
	alice := token(t, "alice", "w1")
	const n = 20
	var wg sync.WaitGroup
	bodies := make(chan string, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", s.base+"/api/data/holidays", strings.NewReader(
				`{"reason":"Once","type":"global","dateFrom":"2027-01-01","dateTo":"2027-01-01"}`))
			req.Header.Set("Authorization", "Bearer "+alice)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", "create-1")
			resp, err := s.client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Error(err)
				return
			}
			bodies <- fmt.Sprint(resp.StatusCode, string(raw))
		}()
	}
	wg.Wait()
	close(bodies)
	distinct := map[string]int{}
	for b := range bodies {
		distinct[b]++
	}
	if len(distinct) != 1 {
		t.Fatalf("concurrent retries got different answers: %v", distinct)
	}
	if got := len(s.logEvents(t, "HolidayCreated")); got != 1 {
		t.Fatalf("%d holidays created by %d retries of one request", got, n)
	}
}

// TestSendAfterItsKeyRecordHasGone: when a key's record had expired (or
// was given up with the store full), a send under it found its
// notification pending and answered 200 echoing the new request, though
// the user holds the first. It now answers what was stored when the retry
// asks for exactly that, and 422 on either transport when it does not.
func TestSendAfterItsKeyRecordHasGone(t *testing.T) {
	s := startService(t)
	svc := sender(t, "w1")
	body := `{"recipientId":"alice","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"task","subject":"first","data":{"taskName":"T","projectName":"P"}}`
	first := s.call("POST", sendPath, svc, body, "Idempotency-Key", "k").want(t, 200)

	forgetKeys(t, s)

	// The same request, spelled differently: the stored notification,
	// its first creation date included.
	same := `{"data":{"projectName":"P", "taskName":"T"},"recipientId":"alice","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"task","subject":"first"}`
	again := s.call("POST", sendPath, svc, same, "Idempotency-Key", "k").want(t, 200)
	var a, b notificationDto
	first.decode(t, &a)
	again.decode(t, &b)
	if a.ID != b.ID || !a.CreateDate.Equal(b.CreateDate) || a.Subject != b.Subject {
		t.Fatalf("retry after the record went answered\n%s\nfor the stored\n%s", again.Data, first.Data)
	}

	other := `{"recipientId":"alice","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"task","subject":"second"}`
	s.call("POST", sendPath, svc, other, "Idempotency-Key", "k2-unused").want(t, 200)
	s.call("POST", sendPath, svc, strings.Replace(other, "second", "third", 1), "Idempotency-Key", "k").want(t, 422)
	msg := nats.NewMsg(natscmd.SendSubject)
	msg.Data = []byte(strings.Replace(other, "second", "third", 1))
	msg.Header.Set("Authorization", "Bearer "+svc)
	msg.Header.Set("Idempotency-Key", "k")
	if env := natsRequest(t, s.connectNATS(), msg); env.StatusCode != "UnprocessableEntity" {
		t.Fatalf("NATS send under a used key with another body: %+v", env)
	}
	if n := len(s.logEvents(t, "NotificationSent")); n != 2 {
		t.Fatalf("%d NotificationSent, want 2", n)
	}
}

// TestSendRetriedAfterItsNotificationWasDeleted: a retry whose key's
// record has gone, of a send whose notification the user deleted since,
// appends nothing (the log's duplicate window knows its key-derived event
// id) and was answered 422 "cannot be shown"; the fault suite met it after
// a kill -9. It was delivered as asked: the answer is the notification.
func TestSendRetriedAfterItsNotificationWasDeleted(t *testing.T) {
	s := startService(t)
	svc := sender(t, "w1")
	alice := token(t, "alice", "w1")
	body := `{"recipientId":"alice","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"task","subject":"gone"}`
	var first notificationDto
	s.call("POST", sendPath, svc, body, "Idempotency-Key", "k").want(t, 200).decode(t, &first)
	s.call("DELETE", "/api/data/notifications/delete/"+first.ID, alice, nil).want(t, 200)

	forgetKeys(t, s)

	var again notificationDto
	s.call("POST", sendPath, svc, body, "Idempotency-Key", "k").want(t, 200).decode(t, &again)
	if again.ID != first.ID || again.Subject != "gone" {
		t.Fatalf("retry answered %+v for %+v", again, first)
	}
	if n := len(s.logEvents(t, "NotificationSent")); n != 1 {
		t.Fatalf("%d NotificationSent, want 1", n)
	}
	if n := s.unread(alice); n != 0 {
		t.Fatalf("the deleted notification came back: %d unread", n)
	}
}

// TestHolidayCreateAfterItsKeyRecordHasGone: a create under a key whose
// record has gone answered 200 with the first holiday, whatever it asked
// for, and created nothing. The same request still gets the holiday it
// made (renamed since, as it is now); another one gets 422.
func TestHolidayCreateAfterItsKeyRecordHasGone(t *testing.T) {
	s := startService(t)
	alice := token(t, "alice", "w1")
	body := map[string]any{"reason": "Founders day", "type": "global", "dateFrom": "2027-05-01", "dateTo": "2027-05-02"}
	var first struct{ ID string }
	s.call("POST", "/api/data/holidays", alice, body, "Idempotency-Key", "k").want(t, 200).decode(t, &first)
	s.call("PUT", "/api/data/holidays/"+first.ID, alice, map[string]any{"reason": "Founders' day"}).want(t, 200)

	forgetKeys(t, s)

	var again struct{ ID, Reason string }
	s.call("POST", "/api/data/holidays", alice, body, "Idempotency-Key", "k").want(t, 200).decode(t, &again)
	if again.ID != first.ID || again.Reason != "Founders' day" {
		t.Fatalf("the same create again answered %+v, want holiday %s as it is now", again, first.ID)
	}
	for field, value := range map[string]string{"reason": "Another day", "dateTo": "2027-05-03"} {
		other := maps.Clone(body)
		other[field] = value
		forgetKeys(t, s) // else the record the request before made answers
		s.call("POST", "/api/data/holidays", alice, other, "Idempotency-Key", "k").want(t, 422)
	}
	if n := len(s.logEvents(t, "HolidayCreated")); n != 1 {
		t.Fatalf("%d HolidayCreated, want 1", n)
	}
}

// forgetKeys empties the idempotency bucket: what expiry does to every
// key, at once.
func forgetKeys(t *testing.T, s *service) {
	t.Helper()
	js, err := jetstream.New(s.connectNATS())
	if err != nil {
		t.Fatal(err)
	}
	bucket, err := js.Stream(t.Context(), "KV_ASTRO_IDEMPOTENCY")
	if err != nil {
		t.Fatal(err)
	}
	if err := bucket.Purge(t.Context()); err != nil {
		t.Fatal(err)
	}
}
