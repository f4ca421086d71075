package natscmd

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"astro/api/auth"
	"astro/commands"
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
		{"C1 controls", "x-integration-name", "cal\u0085end\u009bar-app", "calendar-app"},
		{"bidi controls", "x-integration-name", "\u202ecal\u202aen\u2066dar\u2069-app\u202c", "calendar-app"},
		{"implicit marks stay", "x-integration-name", "cal\u200fendar", "cal\u200fendar"},
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
// dropped, unanswered and unexecuted. Every requester's own inbox is still
// answered: the default one, a user's prefix (_INBOX_service), and the
// reply NATS maps for a requester in another account that imports the
// commands (_R_.…).
func TestRepliesGoOnlyToInboxes(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(conf, []byte(`listen: "127.0.0.1:-1"
accounts {
  ASTRO { users = [{user: astro, password: astro}], exports = [{service: "astro.commands.>"}] }
  OTHER { users = [{user: other, password: other}], imports = [{service: {account: ASTRO, subject: "astro.commands.>"}}] }
}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	opts.NoLog, opts.NoSigs = true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS not ready")
	}
	connect := func(user string, o ...nats.Option) *nats.Conn {
		t.Helper()
		nc, err := nats.Connect(ns.ClientURL(), append(o, nats.UserInfo(user, user))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	nc := connect("astro")
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
	request := func(from *nats.Conn) error {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; {
			_, err := from.Request(SendSubject, []byte(`{}`), time.Second)
			if err == nil || time.Now().After(deadline) {
				return err
			}
		}
	}
	if err := request(nc); err != nil { // the server is subscribed
		t.Fatalf("no answer to a send: %v", err)
	}
	for name, from := range map[string]*nats.Conn{
		"a user's own inbox prefix": connect("astro", nats.CustomInboxPrefix("_INBOX_service")),
		"another account's import":  connect("other"),
		"the default inbox, again":  nc,
	} {
		if err := request(from); err != nil {
			t.Errorf("%s: no answer: %v", name, err)
		}
	}

	spy, err := nc.SubscribeSync("astro.events.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishMsg(&nats.Msg{Subject: SendSubject, Reply: "astro.events.ws.inbox.alice", Data: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := request(nc); err != nil { // answered after the one before it
		t.Fatal(err)
	}
	if m, err := spy.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("an answer was published on the event subject %s: %s", m.Subject, m.Data)
	}
}

// TestHeaderGivenTwiceIsRefused: NATS keeps the case clients write, so a
// message may carry two values of one header, or one under two spellings,
// and which was read depended on a map's order. Two values that differ are
// refused; the same value repeated is that value.
func TestHeaderGivenTwiceIsRefused(t *testing.T) {
	secret := []byte(strings.Repeat("s", auth.MinSecretLen))
	v, err := auth.NewVerifier(t.Context(), auth.Config{HS256Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	sign := func(user string) string {
		t.Helper()
		tok, err := auth.Sign(secret, auth.Claims{UserID: user, WorkspaceID: "ws", Scopes: []string{"notifications:send"}}, time.Now(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + tok
	}
	alice, bob := sign("alice"), sign("bob")
	for _, tc := range []struct {
		name   string
		header nats.Header
		field  string // "" when accepted
	}{
		{"two tokens", nats.Header{"Authorization": {alice, bob}}, "Authorization"},
		{"two spellings", nats.Header{"Authorization": {alice}, "authorization": {bob}}, "Authorization"},
		{"one token twice", nats.Header{"Authorization": {alice}, "AUTHORIZATION": {alice}}, ""},
		{"two keys", nats.Header{"Authorization": {alice}, "Idempotency-Key": {"k1"}, "idempotency-key": {"k2"}}, "Idempotency-Key"},
		{"two integrations", nats.Header{"Authorization": {alice}, "x-integration-name": {"a", "b"}}, "x-integration-name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := nats.NewMsg(SendSubject)
			m.Header = tc.header
			c, err := (&Server{cfg: Config{Verifier: v}}).caller(t.Context(), m, "req")
			if tc.field == "" {
				if err != nil || c.UserID != "alice" {
					t.Fatalf("caller %+v, %v; want alice", c, err)
				}
				return
			}
			var e *commands.Error
			if !errors.As(err, &e) || e.Code != commands.EInvalid || len(e.Fields[tc.field]) == 0 {
				t.Fatalf("caller %+v, %v; want 400 under %s", c, err, tc.field)
			}
		})
	}
}
