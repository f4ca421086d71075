package auth

import (
	"encoding/json"
	"fmt"
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

// UnmarshalJSON reads each claim by its exact name. Claim names are
// case-sensitive (RFC 7519 §4), but encoding/json matches struct fields
// case-insensitively, so a token carrying only "SUB" or "Workspace_ID" --
// claims an issuer may let its users set -- would be read as sub or
// workspace_id. The JWT library checks exp, nbf, iss and aud on this same
// struct, so they too are read only from their exact names.
func (c *wireClaims) UnmarshalJSON(b []byte) error {
	var payload map[string]json.RawMessage
	if err := json.Unmarshal(b, &payload); err != nil {
		return err
	}
	for name, dst := range map[string]any{
		"iss":          &c.Issuer,
		"sub":          &c.Subject,
		"aud":          &c.Audience,
		"exp":          &c.ExpiresAt,
		"nbf":          &c.NotBefore,
		"iat":          &c.IssuedAt,
		"jti":          &c.ID,
		"workspace_id": &c.WorkspaceID,
		"scope":        &c.Scope,
	} {
		raw, ok := payload[name]
		if !ok {
			continue
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			return fmt.Errorf("claim %s: %w", name, err)
		}
	}
	return nil
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
