package auth

import (
	"context"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func TestVerifyHS256(t *testing.T) {
	secret := testSecret()
	t0 := fixedNow()
	enc := base64.RawURLEncoding
	valid := signHS(t, secret, baseClaims())
	hdr, payload, _ := strings.Cut(valid, ".")
	payload, sig, _ := strings.Cut(payload, ".")

	tests := []struct {
		name   string
		cfg    func(*Config)
		token  string
		reason string // "" means it must verify
		check  func(t *testing.T, c Claims)
	}{
		{
			name:  "valid",
			token: valid,
			check: func(t *testing.T, c Claims) {
				if c.UserID != "user_1" || c.WorkspaceID != "ws-1" {
					t.Errorf("ids = %q/%q", c.UserID, c.WorkspaceID)
				}
				if !slices.Equal(c.Scopes, []string{"events:read", "events:write"}) {
					t.Errorf("scopes = %q", c.Scopes)
				}
				if !c.HasScope("events:write") || c.HasScope("events") || c.HasScope("") {
					t.Errorf("HasScope wrong for %q", c.Scopes)
				}
				if !c.ExpiresAt.Equal(t0.Add(time.Hour)) || !c.IssuedAt.Equal(t0.Add(-time.Minute)) {
					t.Errorf("times = iat %v exp %v", c.IssuedAt, c.ExpiresAt)
				}
			},
		},
		{
			name:  "no scope claim",
			token: signHS(t, secret, with(map[string]any{"scope": nil, "iat": nil})),
			check: func(t *testing.T, c Claims) {
				if len(c.Scopes) != 0 || c.HasScope("x") || !c.IssuedAt.IsZero() {
					t.Errorf("claims = %+v", c)
				}
			},
		},
		{name: "expired", token: signHS(t, secret, with(map[string]any{"exp": t0.Add(-time.Minute).Unix()})), reason: "token expired"},
		{name: "expired within leeway", token: signHS(t, secret, with(map[string]any{"exp": t0.Add(-20 * time.Second).Unix()}))},
		{
			name:   "expired, no leeway",
			cfg:    func(c *Config) { c.Leeway = -1 },
			token:  signHS(t, secret, with(map[string]any{"exp": t0.Unix()})),
			reason: "token expired",
		},
		{name: "not yet valid", token: signHS(t, secret, with(map[string]any{"nbf": t0.Add(5 * time.Minute).Unix()})), reason: "token not valid yet"},
		{name: "nbf within leeway", token: signHS(t, secret, with(map[string]any{"nbf": t0.Add(20 * time.Second).Unix()}))},
		{name: "issued in the future", token: signHS(t, secret, with(map[string]any{"iat": t0.Add(5 * time.Minute).Unix()})), reason: "token issued in the future"},
		{name: "missing exp", token: signHS(t, secret, with(map[string]any{"exp": nil})), reason: "missing exp claim"},
		{name: "exp not a number", token: signHS(t, secret, with(map[string]any{"exp": "tomorrow"})), reason: "malformed token"},
		{name: "wrong secret", token: signHS(t, []byte("another-secret-that-is-long-enough!!"), baseClaims()), reason: "invalid signature"},
		{name: "tampered payload", token: hdr + "." + enc.EncodeToString([]byte(`{"sub":"admin","workspace_id":"ws-1","exp":9999999999}`)) + "." + sig, reason: "invalid signature"},
		{name: "alg none", token: noneToken(t, baseClaims()), reason: "unsupported algorithm"},
		{name: "alg none with signature", token: noneToken(t, baseClaims()) + sig, reason: "unsupported algorithm"},
		{name: "HS512 with the right secret", token: signWith(t, jwt.SigningMethodHS512, secret, baseClaims(), nil), reason: "unsupported algorithm"},
		{name: "unknown alg", token: enc.EncodeToString([]byte(`{"alg":"XS999"}`)) + "." + payload + "." + sig, reason: "unsupported algorithm"},
		{name: "no alg", token: enc.EncodeToString([]byte(`{"typ":"JWT"}`)) + "." + payload + "." + sig, reason: "unsupported algorithm"},
		{name: "crit header", token: signWith(t, jwt.SigningMethodHS256, secret, baseClaims(), map[string]any{"crit": []string{"exp"}}), reason: "unsupported critical header"},
		{name: "missing sub", token: signHS(t, secret, with(map[string]any{"sub": nil})), reason: "missing sub claim"},
		{name: "empty sub", token: signHS(t, secret, with(map[string]any{"sub": ""})), reason: "missing sub claim"},
		{name: "sub with dot", token: signHS(t, secret, with(map[string]any{"sub": "a.b"})), reason: "invalid sub claim"},
		{name: "sub with pipe", token: signHS(t, secret, with(map[string]any{"sub": "auth0|123"})), reason: "invalid sub claim"},
		{name: "missing workspace_id", token: signHS(t, secret, with(map[string]any{"workspace_id": nil})), reason: "missing workspace_id claim"},
		{name: "workspace_id wildcard", token: signHS(t, secret, with(map[string]any{"workspace_id": "*"})), reason: "invalid workspace_id claim"},
		{name: "workspace_id full wildcard", token: signHS(t, secret, with(map[string]any{"workspace_id": "ws>"})), reason: "invalid workspace_id claim"},
		{name: "workspace_id subject separator", token: signHS(t, secret, with(map[string]any{"workspace_id": "ws.other"})), reason: "invalid workspace_id claim"},
		{name: "workspace_id space", token: signHS(t, secret, with(map[string]any{"workspace_id": "ws 1"})), reason: "invalid workspace_id claim"},
		{name: "workspace_id non-ASCII", token: signHS(t, secret, with(map[string]any{"workspace_id": "wś"})), reason: "invalid workspace_id claim"},
		{name: "workspace_id 64 chars", token: signHS(t, secret, with(map[string]any{"workspace_id": repeat("w", 64)}))},
		{name: "workspace_id 65 chars", token: signHS(t, secret, with(map[string]any{"workspace_id": repeat("w", 65)})), reason: "invalid workspace_id claim"},
		{name: "workspace_id number", token: signHS(t, secret, with(map[string]any{"workspace_id": 42})), reason: "malformed token"},
		{name: "empty", token: "", reason: "missing bearer token"},
		{name: "one segment", token: "abc", reason: "malformed token"},
		{name: "two segments", token: "a.b", reason: "malformed token"},
		{name: "four segments", token: valid + ".x", reason: "malformed token"},
		{name: "garbage base64", token: "!!!.@@@.###", reason: "malformed token"},
		{name: "base64 of garbage", token: "Zm9v.YmFy.YmF6", reason: "malformed token"},
		{name: "padded base64", token: hdr + "=." + payload + "." + sig, reason: "malformed token"},
		{name: "newline spliced into signature", token: hdr + "." + payload + "." + sig[:4] + "\n" + sig[4:], reason: "malformed token"},
		{name: "non-canonical signature", token: hdr + "." + payload + "." + sig[:len(sig)-1] + flipLowBits(sig[len(sig)-1]), reason: "malformed token"},
		{name: "too large", token: hdr + "." + repeat("A", maxTokenLen) + "." + sig, reason: "token too large"},
		{name: "surrounding space", token: " " + valid, reason: "malformed token"},

		// Issuer and audience are checked only when configured.
		{name: "iss ignored when unset", token: signHS(t, secret, with(map[string]any{"iss": "someone", "aud": "else"}))},
		{
			name:  "iss and aud match",
			cfg:   issAud,
			token: signHS(t, secret, with(map[string]any{"iss": "https://id.example", "aud": []string{"other", "astro-api"}})),
			check: func(t *testing.T, c Claims) {
				if c.Issuer != "https://id.example" || !slices.Equal(c.Audience, []string{"other", "astro-api"}) {
					t.Errorf("iss/aud = %q/%q", c.Issuer, c.Audience)
				}
			},
		},
		{name: "wrong issuer", cfg: issAud, token: signHS(t, secret, with(map[string]any{"iss": "https://evil.example", "aud": "astro-api"})), reason: "invalid issuer"},
		{name: "missing issuer", cfg: issAud, token: signHS(t, secret, with(map[string]any{"aud": "astro-api"})), reason: "missing iss claim"},
		{name: "wrong audience", cfg: issAud, token: signHS(t, secret, with(map[string]any{"iss": "https://id.example", "aud": []string{"other"}})), reason: "invalid audience"},
		{name: "missing audience", cfg: issAud, token: signHS(t, secret, with(map[string]any{"iss": "https://id.example"})), reason: "missing aud claim"},
		{name: "expired and wrong issuer", cfg: issAud, token: signHS(t, secret, with(map[string]any{"iss": "x", "aud": "astro-api", "exp": t0.Add(-time.Hour).Unix()})), reason: "token expired"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := newHSVerifier(t, tc.cfg)
			c, err := v.Verify(t.Context(), tc.token)
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("Verify: %v (cause: %v)", err, errors.Unwrap(err))
				}
				if tc.check != nil {
					tc.check(t, c)
				}
				return
			}
			wantRefusal(t, err, tc.reason)
			if c.UserID != "" || c.WorkspaceID != "" || c.Scopes != nil {
				t.Errorf("refused token still returned claims %+v", c)
			}
			if strings.Contains(err.Error(), string(secret)) {
				t.Error("error text contains the secret")
			}
		})
	}
}

func issAud(c *Config) {
	c.Issuer = "https://id.example"
	c.Audience = "astro-api"
}

// flipLowBits returns the base64url digit that differs from c only in its
// two lowest bits, which a 32-byte signature's last digit does not use.
func flipLowBits(c byte) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	i := strings.IndexByte(alphabet, c)
	return string(alphabet[i^1])
}

func TestVerifyUsesInjectedClock(t *testing.T) {
	secret := testSecret()
	now := fixedNow()
	v := newHSVerifier(t, func(c *Config) { c.Now = func() time.Time { return now } })
	tok := signHS(t, secret, baseClaims()) // exp is fixedNow + 1h

	if _, err := v.Verify(t.Context(), tok); err != nil {
		t.Fatalf("Verify at issue time: %v", err)
	}
	now = now.Add(2 * time.Hour)
	_, err := v.Verify(t.Context(), tok)
	wantRefusal(t, err, "token expired")
}

func TestVerifierKeepsOwnSecretCopy(t *testing.T) {
	secret := testSecret()
	v := newHSVerifier(t, func(c *Config) { c.HS256Secret = secret })
	tok := signHS(t, testSecret(), baseClaims())
	secret[0] ^= 0xff
	if _, err := v.Verify(t.Context(), tok); err != nil {
		t.Fatalf("Verify after caller changed its buffer: %v", err)
	}
}

func TestNewVerifierRejectsBadConfig(t *testing.T) {
	if _, err := NewVerifier(t.Context(), Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("empty config: err = %v, want ErrInvalidConfig", err)
	}
	//lint:ignore SA1012 a nil context is exactly what is being tested
	if _, err := NewVerifier(nil, Config{HS256Secret: testSecret()}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("nil ctx: err = %v, want ErrInvalidConfig", err)
	}
}

func TestZeroVerifierRefuses(t *testing.T) {
	var nilV *Verifier
	for _, v := range []*Verifier{nilV, {}} {
		_, err := v.Verify(t.Context(), signHS(t, testSecret(), baseClaims()))
		wantRefusal(t, err, "invalid token")
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{name: "nothing", cfg: Config{}, wantErr: true},
		{name: "secret", cfg: Config{HS256Secret: testSecret()}},
		{name: "secret exactly 32", cfg: Config{HS256Secret: []byte(repeat("k", 32))}},
		{name: "secret 31", cfg: Config{HS256Secret: []byte(repeat("k", 31))}, wantErr: true},
		{name: "short secret with JWKS", cfg: Config{HS256Secret: []byte("short"), JWKSURL: "https://id.example/jwks"}, wantErr: true},
		{name: "https JWKS", cfg: Config{JWKSURL: "https://id.example/.well-known/jwks.json"}},
		{name: "http loopback JWKS", cfg: Config{JWKSURL: "http://127.0.0.1:8080/jwks"}},
		{name: "http localhost JWKS", cfg: Config{JWKSURL: "http://localhost/jwks"}},
		{name: "http IPv6 loopback JWKS", cfg: Config{JWKSURL: "http://[::1]:9000/jwks"}},
		{name: "http remote JWKS", cfg: Config{JWKSURL: "http://id.example/jwks"}, wantErr: true},
		{name: "ftp JWKS", cfg: Config{JWKSURL: "ftp://id.example/jwks"}, wantErr: true},
		{name: "relative JWKS", cfg: Config{JWKSURL: "/jwks"}, wantErr: true},
		{name: "unparsable JWKS", cfg: Config{JWKSURL: "https://id.example/%zz"}, wantErr: true},
		{name: "negative refresh", cfg: Config{JWKSURL: "https://id.example/jwks", JWKSRefreshInterval: -time.Second}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.wantErr != (err != nil) {
				t.Fatalf("Validate() = %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil && !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
		})
	}
}

func TestReason(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{err: unauthorized("token expired", errors.New("detail")), want: "token expired"},
		{err: errors.Join(errors.New("ctx"), unauthorized("invalid signature", nil)), want: "invalid signature"},
		{err: ErrUnauthorized, want: "unauthorized"},
		{err: errors.New("boom"), want: ""},
		{err: nil, want: ""},
	}
	for _, tc := range tests {
		if got := Reason(tc.err); got != tc.want {
			t.Errorf("Reason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestVerifyLogsRefusalCause(t *testing.T) {
	// The cause goes to the operator's log, never into the error text.
	var buf strings.Builder
	v := newHSVerifier(t, func(c *Config) { c.Logger = debugLogger(&buf) })
	_, err := v.Verify(context.Background(), signHS(t, testSecret(), with(map[string]any{"exp": fixedNow().Add(-time.Hour).Unix()})))
	wantRefusal(t, err, "token expired")
	if !strings.Contains(buf.String(), "token is expired") {
		t.Errorf("log lacks the library cause: %s", buf.String())
	}
}

func BenchmarkVerifyHS256(b *testing.B) {
	v := newHSVerifier(b, nil)
	tok := signHS(b, testSecret(), baseClaims())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(ctx, tok); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyHS256Refused(b *testing.B) {
	v := newHSVerifier(b, nil)
	tok := signHS(b, []byte("another-secret-that-is-long-enough!!"), baseClaims())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(ctx, tok); err == nil {
			b.Fatal("verified")
		}
	}
}
