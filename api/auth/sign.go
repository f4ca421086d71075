package auth

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// ErrInvalidClaims is wrapped by Sign when the claims could never verify.
var ErrInvalidClaims = errors.New("auth: invalid claims")

// Sign makes a development HS256 token for c, issued at now and expiring
// ttl later (the `astro token` command). c's IssuedAt and ExpiresAt are
// ignored; Issuer, Audience and ID are copied when set. It refuses claims
// Verify would refuse, so a minted token is never dead on arrival.
func Sign(secret []byte, c Claims, now time.Time, ttl time.Duration) (string, error) {
	if len(secret) < MinSecretLen {
		return "", fmt.Errorf("%w: secret is %d bytes, need at least %d", ErrInvalidConfig, len(secret), MinSecretLen)
	}
	if ttl <= 0 {
		return "", fmt.Errorf("%w: ttl %v is not positive", ErrInvalidClaims, ttl)
	}
	if !validID(c.UserID) {
		return "", fmt.Errorf("%w: user id %q must match [A-Za-z0-9_-]{1,64}", ErrInvalidClaims, c.UserID)
	}
	if !validID(c.WorkspaceID) {
		return "", fmt.Errorf("%w: workspace id %q must match [A-Za-z0-9_-]{1,64}", ErrInvalidClaims, c.WorkspaceID)
	}
	for _, s := range c.Scopes {
		// The wire form is space separated, so these would come back as a
		// different scope list.
		if s == "" || strings.ContainsAny(s, " \t\r\n") {
			return "", fmt.Errorf("%w: scope %q is empty or contains whitespace", ErrInvalidClaims, s)
		}
	}
	wc := wireClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   c.UserID,
			Issuer:    c.Issuer,
			Audience:  c.Audience,
			ID:        c.ID,
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
		},
		WorkspaceID: c.WorkspaceID,
		Scope:       strings.Join(c.Scopes, " "),
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, wc).SignedString(secret)
	if err != nil {
		return "", fmt.Errorf("auth: sign token: %w", err)
	}
	return s, nil
}
