package auth

import (
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Claims is what a verified token says about its bearer.
type Claims struct {
	UserID      string   // sub
	WorkspaceID string   // workspace_id
	Scopes      []string // scope, space separated on the wire
	// The rest is informational on Verify; Sign uses Issuer, Audience and
	// ID and computes the times itself.
	Issuer    string
	Audience  []string
	ID        string    // jti
	IssuedAt  time.Time // zero when the token has no iat
	ExpiresAt time.Time
}

// HasScope reports whether the token was granted scope s (exact match).
func (c Claims) HasScope(s string) bool {
	return slices.Contains(c.Scopes, s)
}

// wireClaims is the JSON shape of a token's payload.
type wireClaims struct {
	jwt.RegisteredClaims
	WorkspaceID string `json:"workspace_id,omitempty"`
	Scope       string `json:"scope,omitempty"`
}

// validID reports whether s can be a user or workspace id. Both become
// tokens of NATS subjects downstream (e.g. events.<workspace>.<user>...),
// where "." separates tokens, "*" and ">" are wildcards and whitespace is
// illegal; a claim carrying any of those could address, or subscribe to,
// another workspace's subjects. Hence the closed alphabet [A-Za-z0-9_-]
// and the 64-byte cap. Hand-written rather than a regexp because it runs
// on every request.
func validID(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
