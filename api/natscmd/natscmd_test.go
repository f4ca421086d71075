package natscmd

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"astro/api/auth"
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
