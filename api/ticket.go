package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"time"
)

// Stream tickets. A browser's EventSource cannot send an Authorization
// header, and a bearer token in a URL ends up in access logs, proxies and
// browser history, where it stays usable for its whole life against every
// endpoint. A ticket is what the URL carries instead: obtained with the
// bearer token, valid for minutes, bound to its user and workspace, and
// good for opening the notification stream only. It is signed with a key
// of its own (HMAC-SHA256 over a purpose label and the claims), so it
// cannot pass for a bearer token (it is not a JWT, and no verifier holds
// its key), and a bearer token cannot pass for it.
const (
	ticketPrefix  = "st1_"
	ticketPurpose = "astro notification stream ticket v1\n"
)

// ticketClaims is what a ticket says. TokenExpires is the expiry of the
// bearer token it was obtained with: a stream opened with the ticket ends
// then, as one opened with the token would.
type ticketClaims struct {
	UserID       string `json:"sub"`
	WorkspaceID  string `json:"ws"`
	Expires      int64  `json:"exp"`             // Unix seconds
	TokenExpires int64  `json:"tokExp,omitzero"` // Unix seconds; 0: the token had none
}

var errTicket = errors.New("the stream ticket is invalid or has expired")

// signTicket returns the ticket for claims.
func signTicket(key []byte, c ticketClaims) string {
	payload, _ := json.Marshal(c) // plain strings and numbers: cannot fail
	p := base64.RawURLEncoding.EncodeToString(payload)
	return ticketPrefix + p + "." + base64.RawURLEncoding.EncodeToString(ticketMAC(key, p))
}

func ticketMAC(key []byte, payload string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(ticketPurpose))
	m.Write([]byte(payload))
	return m.Sum(nil)
}

// verifyTicket checks a ticket's signature and expiry at now.
func verifyTicket(key []byte, ticket string, now time.Time) (ticketClaims, error) {
	rest, ok := strings.CutPrefix(ticket, ticketPrefix)
	if !ok || len(key) == 0 {
		return ticketClaims{}, errTicket
	}
	p, sig, ok := strings.Cut(rest, ".")
	if !ok {
		return ticketClaims{}, errTicket
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, ticketMAC(key, p)) {
		return ticketClaims{}, errTicket
	}
	payload, err := base64.RawURLEncoding.DecodeString(p)
	if err != nil {
		return ticketClaims{}, errTicket
	}
	var c ticketClaims
	if err := json.Unmarshal(payload, &c); err != nil || c.UserID == "" || c.WorkspaceID == "" {
		return ticketClaims{}, errTicket
	}
	if !now.Before(time.Unix(c.Expires, 0)) {
		return ticketClaims{}, errTicket
	}
	return c, nil
}
