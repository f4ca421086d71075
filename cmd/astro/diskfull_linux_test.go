package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"astro/events/natstest"
)

// TestFullDiskHealsWithoutRestart fills the embedded log's disk: a send
// fails with 503, /readyz says why, and once the disk is freed the
// service takes writes again on its own, with every send it acknowledged
// in the recipient's inbox.
func TestFullDiskHealsWithoutRestart(t *testing.T) {
	s := startEmbedded(t)
	alice := token(t, "alice", "w-disk")
	svc := sender(t, "w-disk")
	acked := 1
	s.send(svc, "alice", "bob", "before")
	body := map[string]any{"recipientId": "alice", "senderId": idOf("bob"), "notificationType": "during"}
	failed := 0
	failSend := func() {
		t.Helper()
		failed++
		// Not s.call: a 503 is the expected answer here, not a server error.
		env := s.callRaw(t, "POST", sendPath, svc, body)
		if env.Status != 503 || env.Header.Get("Retry-After") == "" {
			t.Fatalf("a send on a full disk answered %d, Retry-After %q; want 503 with Retry-After: %s", env.Status, env.Header.Get("Retry-After"), env.raw)
		}
	}
	readyz := func() (int, string) {
		t.Helper()
		resp, err := s.client.Get(s.base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var env struct{ Error struct{ Message string } }
		if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, env.Error.Message
	}

	free := natstest.DiskFull(t)
	failSend()
	// The service restarts JetStream on its own every few seconds, which
	// a full disk fails again at the next write: until /readyz says why,
	// writes go on failing.
	waitFor(t, 30*time.Second, func() error {
		status, msg := readyz()
		if status == 503 && strings.Contains(msg, "disk full") {
			return nil
		}
		failSend()
		return fmt.Errorf("/readyz answered %d: %s", status, msg)
	})
	free()

	s.waitReady()
	s.send(svc, "alice", "bob", "after")
	acked++
	// A send that answered 503 may or may not have happened (README,
	// Guarantees): its append can reach the log once the connection is
	// back.
	if got := s.unread(alice); got < acked || got > acked+failed {
		t.Fatalf("unread %d after the disk was freed, want the %d sends acknowledged and at most the %d that failed", got, acked, failed)
	}
}
