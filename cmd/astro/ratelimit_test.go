package main

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"

	"astro/api/natscmd"
)

func TestRateLimit(t *testing.T) {
	s := startService(t, func(env map[string]string) {
		env["ASTRO_RATE_LIMIT"] = "1"
		env["ASTRO_RATE_BURST"] = "2"
	})
	alice := token(t, "alice", "w1")
	bob := token(t, "bob", "w1")
	for range 2 {
		s.call("GET", "/api/data/notifications/unreadcount", alice, nil).want(t, 200)
	}
	env := s.call("GET", "/api/data/notifications/unreadcount", alice, nil).want(t, 429)
	if env.StatusCode != "TooManyRequests" {
		t.Fatalf("statusCode %q", env.StatusCode)
	}
	if secs, err := strconv.Atoi(env.Header.Get("Retry-After")); err != nil || secs < 1 {
		t.Fatalf("Retry-After %q", env.Header.Get("Retry-After"))
	}
	s.call("GET", "/api/data/notifications/unreadcount", bob, nil).want(t, 200)
}

// TestRateLimitOverNATS: sends over NATS skipped the per-caller limit, so
// one token could send at any rate there while HTTP refused it. Both
// transports now draw on one budget per caller, and NATS answers 429 in
// the same envelope, its wait in the message (a NATS reply has no headers),
// before any work: a retry under a key kept for replay is refused too, as
// over HTTP.
func TestRateLimitOverNATS(t *testing.T) {
	s := startService(t, func(env map[string]string) {
		// A token every 100 s: the burst is all a test can spend.
		env["ASTRO_RATE_LIMIT"] = "0.01"
		env["ASTRO_RATE_BURST"] = "2"
	})
	nc := s.connectNATS()
	const body = `{"recipientId":"alice","senderId":"00005fc0-0000-4000-8000-000000000002","notificationType":"t","subject":"s"}`
	overNATS := func(tok, key string) envelope {
		t.Helper()
		msg := nats.NewMsg(natscmd.SendSubject)
		msg.Data = []byte(body)
		msg.Header.Set("Authorization", "Bearer "+tok)
		if key != "" {
			msg.Header.Set("Idempotency-Key", key)
		}
		return natsRequest(t, nc, msg)
	}
	overHTTP := func(tok string) envelope {
		t.Helper()
		return s.call("POST", "/api/data/notifications", tok, body)
	}
	refusedOverNATS := func(who string, env envelope) {
		t.Helper()
		if env.Success || !env.HasError || env.StatusCode != "TooManyRequests" || env.Error == nil {
			t.Fatalf("%s over its budget over NATS answered %s %s, want TooManyRequests", who, env.StatusCode, env.Data)
		}
		if m := regexp.MustCompile(`retry after (\d+) s`).FindStringSubmatch(env.Error.Message); m == nil || m[1] == "0" {
			t.Fatalf("%s refused over NATS without a wait to retry after: %q", who, env.Error.Message)
		}
	}

	// svc1 spends its budget over NATS: NATS and HTTP refuse it then.
	svc1 := token(t, "svc1", "w1", "notifications:send")
	for _, key := range []string{"first", ""} {
		if env := overNATS(svc1, key); env.StatusCode != "OK" {
			t.Fatalf("svc1's send over NATS within its burst answered %s %s", env.StatusCode, env.Data)
		}
	}
	refusedOverNATS("svc1", overNATS(svc1, ""))
	refusedOverNATS("svc1 retrying under a kept key", overNATS(svc1, "first"))
	overHTTP(svc1).want(t, 429)

	// svc2 spends its budget over HTTP: NATS refuses it then.
	svc2 := token(t, "svc2", "w1", "notifications:send")
	for range 2 {
		overHTTP(svc2).want(t, 200)
	}
	refusedOverNATS("svc2", overNATS(svc2, ""))

	if sent := s.logEvents(t, "NotificationSent"); len(sent) != 4 {
		t.Fatalf("%d sends appended, want the 4 within the budgets", len(sent))
	}
}
