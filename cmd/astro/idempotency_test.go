package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
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
	if n := len(s.logEvents(t, "NotificationSent")); n != 1 {
		t.Fatalf("%d NotificationSent after a retried send, want 1", n)
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
