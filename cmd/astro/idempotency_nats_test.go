package main

import (
	"testing"

	"github.com/nats-io/nats.go"

	"astro/api/natscmd"
)

// TestIdempotencyKeyAcrossTransports: over NATS the Idempotency-Key was
// ignored, so a retry sent twice. It now goes through the same records as
// HTTP: a replay answers what was first answered and appends nothing; a key
// reused with another request, or on the other transport, answers 422.
func TestIdempotencyKeyAcrossTransports(t *testing.T) {
	s := startService(t)
	nc := s.connectNATS()
	svc := token(t, "svc", "w1", "notifications:send")
	const body = `{"recipientId":"alice","senderId":"00005fc0-0000-4000-8000-000000000002","notificationType":"t","subject":"first"}`
	overNATS := func(key, body string) envelope {
		t.Helper()
		msg := nats.NewMsg(natscmd.SendSubject)
		msg.Data = []byte(body)
		msg.Header.Set("Authorization", "Bearer "+svc)
		msg.Header.Set("Idempotency-Key", key)
		return natsRequest(t, nc, msg)
	}

	first := overNATS("nats-key", body)
	again := overNATS("nats-key", body)
	if !first.Success || !again.Success || string(first.Data) != string(again.Data) {
		t.Fatalf("NATS retry answered\n%s\nafter\n%s", again.Data, first.Data)
	}
	if sent := s.logEvents(t, "NotificationSent"); len(sent) != 1 {
		t.Fatalf("a NATS retry with the same key appended %d sends", len(sent))
	}
	if env := overNATS("nats-key", `{"recipientId":"alice","senderId":"00005fc0-0000-4000-8000-000000000002","notificationType":"t","subject":"second"}`); env.StatusCode != "UnprocessableEntity" {
		t.Fatalf("NATS key reused with another body: %+v", env)
	}
	// The same key and body over HTTP is another request: 422, not a send.
	if env := s.call("POST", "/api/data/notifications", svc, body, "Idempotency-Key", "nats-key"); env.Status != 422 {
		t.Fatalf("HTTP with a key first used over NATS: HTTP %d: %s", env.Status, env.raw)
	}
	// And the other way round.
	s.call("POST", "/api/data/notifications", svc, body, "Idempotency-Key", "http-key").want(t, 200)
	if env := overNATS("http-key", body); env.StatusCode != "UnprocessableEntity" {
		t.Fatalf("NATS with a key first used over HTTP: %+v", env)
	}
	if sent := s.logEvents(t, "NotificationSent"); len(sent) != 2 {
		t.Fatalf("%d sends appended, want 2 (one per transport)", len(sent))
	}
	for _, key := range []string{"\x7f", ""} { // sent empty, refused as over HTTP
		if env := overNATS(key, body); env.StatusCode != "BadRequest" {
			t.Fatalf("NATS with the invalid key %q: %+v", key, env)
		}
	}
	if sent := s.logEvents(t, "NotificationSent"); len(sent) != 2 {
		t.Fatalf("%d sends appended, want 2: refused keys appended", len(sent))
	}
}
