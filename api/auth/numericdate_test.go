package auth

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestTimeClaimsMustBeNumbers: RFC 7519 §2 makes exp, nbf and iat
// NumericDates, JSON numbers. The JWT library reads a string holding a
// number too, so a token with "exp":"9999999999" was accepted.
func TestTimeClaimsMustBeNumbers(t *testing.T) {
	v := newHSVerifier(t, nil)
	later := fixedNow().Add(time.Hour).Unix()
	earlier := fixedNow().Add(-time.Minute).Unix()
	for _, c := range []struct {
		claim  string
		value  any
		reason string
	}{
		{"exp", fmt.Sprint(later), reasonBadClaims},
		{"exp", fmt.Sprintf("%d.5", later), reasonBadClaims},
		{"exp", fmt.Sprintf(" %d", later), reasonMalformed},
		{"nbf", fmt.Sprint(earlier), reasonBadClaims},
		{"iat", fmt.Sprint(earlier), reasonBadClaims},
		{"exp", true, reasonMalformed},
		{"exp", []any{later}, reasonMalformed},
	} {
		t.Run(fmt.Sprintf("%s=%#v", c.claim, c.value), func(t *testing.T) {
			tok := signHS(t, testSecret(), with(map[string]any{c.claim: c.value}))
			_, err := v.Verify(context.Background(), tok)
			wantRefusal(t, err, c.reason)
		})
	}
	// Numbers, fractional ones included (RFC 7519 allows them), still pass.
	for _, exp := range []any{later, float64(later) + 0.5} {
		if _, err := v.Verify(context.Background(), signHS(t, testSecret(), with(map[string]any{"exp": exp}))); err != nil {
			t.Errorf("exp %v: %v", exp, err)
		}
	}
}
