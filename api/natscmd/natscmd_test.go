package natscmd

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"astro/api/auth"
	"astro/events/natstest"
)

// caller authenticates a message carrying header name: value, as a send
// would be.
func caller(t *testing.T, name, value string) string {
	t.Helper()
	secret := []byte(strings.Repeat("s", auth.MinSecretLen))
	v, err := auth.NewVerifier(t.Context(), auth.Config{HS256Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := auth.Sign(secret, auth.Claims{UserID: "svc", WorkspaceID: "ws", Scopes: []string{"notifications:send"}}, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(SendSubject)
	m.Header.Set("Authorization", "Bearer "+tok)
	m.Header[name] = []string{value}
	c, err := (&Server{cfg: Config{Verifier: v}}).caller(t.Context(), m, "req")
	if err != nil {
		t.Fatal(err)
	}
	return c.Integration
}

// TestIntegrationNameIsCleaned: the name lands in every event the send
// causes and in log lines, so NATS holds it to what HTTP does: trimmed,
// at most 100 bytes, no control characters.
func TestIntegrationNameIsCleaned(t *testing.T) {
	cases := []struct {
		name, header, value, want string
	}{
		{"plain", "x-integration-name", "calendar-app", "calendar-app"},
		{"header in another case", "X-Integration-Name", "calendar-app", "calendar-app"},
		{"surrounding space", "x-integration-name", " \tcalendar-app \t", "calendar-app"},
		{"control characters", "x-integration-name", "cal\x00end\x1bar\x7f-app", "calendar-app"},
		{"line break", "x-integration-name", "calendar\r\nX-Forged: 1", "calendarX-Forged: 1"},
		{"too long", "x-integration-name", strings.Repeat("a", 300), strings.Repeat("a", 100)},
		{"absent", "x-other", "calendar-app", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := caller(t, tc.header, tc.value); got != tc.want {
				t.Fatalf("integration %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRepliesGoOnlyToInboxes: a requester chooses its reply subject and
// NATS does not check it, while Astro answers on its own connection, which
// may publish on any subject. An answer sent to an event subject would be
// stored as an aggregate's event and break it for good; such a command is
// dropped, unanswered and unexecuted.
func TestRepliesGoOnlyToInboxes(t *testing.T) {
	nc := natstest.Conn(t)
	v, err := auth.NewVerifier(t.Context(), auth.Config{HS256Secret: []byte(strings.Repeat("s", auth.MinSecretLen))})
	if err != nil {
		t.Fatal(err)
	}
	// One worker: each message is answered before the next is taken.
	s := &Server{nc: nc, cfg: Config{Verifier: v, Workers: 1, Logger: slog.New(slog.DiscardHandler)}}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	request := func() {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; {
			_, err := nc.Request(SendSubject, []byte(`{}`), time.Second)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no answer to a send: %v", err)
			}
		}
	}
	request() // the server is subscribed

	spy, err := nc.SubscribeSync("astro.events.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishMsg(&nats.Msg{Subject: SendSubject, Reply: "astro.events.ws.inbox.alice", Data: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	request() // answered after the one before it
	if m, err := spy.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("an answer was published on the event subject %s: %s", m.Subject, m.Data)
	}
}
