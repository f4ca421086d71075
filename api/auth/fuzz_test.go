package auth

import (
	"errors"
	"testing"
	"time"
)

// FuzzVerify feeds arbitrary strings to an HS256 verifier. Nothing may
// panic, every refusal must carry ErrUnauthorized and a reason, and the only
// input that verifies is the one genuinely signed token among the seeds:
// any other spelling of it (padding, newlines, non-canonical base64,
// header tweaks) must be refused.
func FuzzVerify(f *testing.F) {
	secret := testSecret()
	valid := signHS(f, secret, baseClaims())
	expired := signHS(f, secret, with(map[string]any{"exp": fixedNow().Add(-time.Hour).Unix()}))
	seeds := []string{
		valid,
		expired,
		noneToken(f, baseClaims()),
		signHS(f, []byte("another-secret-that-is-long-enough!!"), baseClaims()),
		"", "abc", "a.b", "a.b.c", "..", "!!!.@@@.###",
		"eyJhbGciOiJIUzI1NiJ9.e30.",
		"eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.",
		valid + "=", valid + "\n", " " + valid,
	}
	for _, s := range seeds {
		f.Add(s)
	}
	v := newHSVerifier(f, nil)

	f.Fuzz(func(t *testing.T, token string) {
		c, err := v.Verify(t.Context(), token)
		if err == nil {
			if token != valid {
				t.Fatalf("verified an input that was never signed: %q -> %+v", token, c)
			}
			return
		}
		if !errors.Is(err, ErrUnauthorized) || Reason(err) == "" {
			t.Fatalf("refusal %v lacks ErrUnauthorized or a reason", err)
		}
	})
}
