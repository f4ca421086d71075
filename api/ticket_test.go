package api

import (
	"strings"
	"testing"
	"time"
)

func TestTicket(t *testing.T) {
	key := []byte("ticket-key-ticket-key-ticket-key-0123")
	now := time.Date(2027, 1, 1, 12, 0, 0, 0, time.UTC)
	claims := ticketClaims{UserID: "alice", WorkspaceID: "w1", Expires: now.Add(5 * time.Minute).Unix(), TokenExpires: now.Add(time.Hour).Unix()}
	good := signTicket(key, claims)
	got, err := verifyTicket(key, good, now)
	if err != nil || got != claims {
		t.Fatalf("verify a fresh ticket: %+v, %v", got, err)
	}
	payload, sig, _ := strings.Cut(strings.TrimPrefix(good, ticketPrefix), ".")
	forged := signTicket(key, ticketClaims{UserID: "bob", WorkspaceID: "w1", Expires: claims.Expires})
	forgedPayload, _, _ := strings.Cut(strings.TrimPrefix(forged, ticketPrefix), ".")
	for _, c := range []struct {
		name, ticket string
		key          []byte
		at           time.Time
	}{
		{"expired", good, key, now.Add(5 * time.Minute)},
		{"other key", good, []byte("another-key-another-key-another-key!"), now},
		{"no key", good, nil, now},
		{"another user's payload under this signature", ticketPrefix + forgedPayload + "." + sig, key, now},
		{"no prefix", payload + "." + sig, key, now},
		{"no signature", ticketPrefix + payload, key, now},
		{"a JWT", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2ln", key, now},
		{"empty", "", key, now},
		{"signature not base64", ticketPrefix + payload + ".***", key, now},
	} {
		if _, err := verifyTicket(c.key, c.ticket, c.at); err == nil {
			t.Errorf("%s: verified", c.name)
		}
	}
}
