package auth

import (
	"crypto/elliptic"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func TestVerifyJWKS(t *testing.T) {
	rsa1 := rsaKey(t, "rsa-1", jwt.SigningMethodRS256)
	impostor := rsaKey(t, "rsa-1", jwt.SigningMethodRS256) // same kid, different key
	ec256 := ecKey(t, "ec-256", jwt.SigningMethodES256, elliptic.P256())
	ec384 := ecKey(t, "ec-384", jwt.SigningMethodES384, elliptic.P384())
	ec521 := ecKey(t, "ec-521", jwt.SigningMethodES512, elliptic.P521())
	srv := newJWKSServer(t, rsa1, ec256, ec384, ec521)

	as := func(k testKey, kid string, m jwt.SigningMethod) testKey { k.kid, k.method = kid, m; return k }
	pubDER, err := x509.MarshalPKIXPublicKey(rsa1.priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	mixed := func(c *Config) { c.HS256Secret = testSecret() }

	tests := []struct {
		name   string
		cfg    func(*Config)
		token  string
		reason string // "" means it must verify
	}{
		{name: "RS256", token: rsa1.sign(t, baseClaims())},
		{name: "RS384", token: as(rsa1, "rsa-1", jwt.SigningMethodRS384).sign(t, baseClaims())},
		{name: "RS512", token: as(rsa1, "rsa-1", jwt.SigningMethodRS512).sign(t, baseClaims())},
		{name: "PS256", token: as(rsa1, "rsa-1", jwt.SigningMethodPS256).sign(t, baseClaims())},
		{name: "ES256", token: ec256.sign(t, baseClaims())},
		{name: "ES384", token: ec384.sign(t, baseClaims())},
		{name: "ES512", token: ec521.sign(t, baseClaims())},
		{name: "no kid tries every key", token: signWith(t, jwt.SigningMethodES256, ec256.priv, baseClaims(), nil)},
		{name: "same kid, other key", token: impostor.sign(t, baseClaims()), reason: "invalid signature"},
		{name: "unknown kid", token: as(ec256, "nobody", jwt.SigningMethodES256).sign(t, baseClaims()), reason: "unknown signing key"},
		{name: "ES256 under an RSA kid", token: as(ec256, "rsa-1", jwt.SigningMethodES256).sign(t, baseClaims()), reason: "invalid signature"},
		{name: "RS256 under an EC kid", token: as(rsa1, "ec-256", jwt.SigningMethodRS256).sign(t, baseClaims()), reason: "invalid signature"},
		{name: "PS384 not allowed", token: as(rsa1, "rsa-1", jwt.SigningMethodPS384).sign(t, baseClaims()), reason: "unsupported algorithm"},
		{name: "HS256 against JWKS only", token: signHS(t, testSecret(), baseClaims()), reason: "unsupported algorithm"},
		{
			name:   "HS256 keyed with the published RSA key",
			token:  signWith(t, jwt.SigningMethodHS256, pubDER, baseClaims(), map[string]any{"kid": "rsa-1"}),
			reason: "unsupported algorithm",
		},
		{name: "alg none", token: noneToken(t, baseClaims()), reason: "unsupported algorithm"},
		{name: "expired", token: rsa1.sign(t, with(map[string]any{"exp": fixedNow().Add(-time.Hour).Unix()})), reason: "token expired"},
		{name: "bad workspace_id", token: ec256.sign(t, with(map[string]any{"workspace_id": "a.>"})), reason: "invalid workspace_id claim"},
		{name: "wrong issuer", cfg: issAud, token: rsa1.sign(t, with(map[string]any{"iss": "https://evil.example", "aud": "astro-api"})), reason: "invalid issuer"},

		// Both sources: each algorithm still goes only to its own source.
		{name: "mixed: HS256", cfg: mixed, token: signHS(t, testSecret(), baseClaims())},
		{name: "mixed: RS256", cfg: mixed, token: rsa1.sign(t, baseClaims())},
		{
			name:   "mixed: HS256 keyed with the published RSA key",
			cfg:    mixed,
			token:  signWith(t, jwt.SigningMethodHS256, pubDER, baseClaims(), map[string]any{"kid": "rsa-1"}),
			reason: "invalid signature",
		},
		{name: "mixed: HS512", cfg: mixed, token: signWith(t, jwt.SigningMethodHS512, testSecret(), baseClaims(), nil), reason: "unsupported algorithm"},
		{name: "mixed: alg none", cfg: mixed, token: noneToken(t, baseClaims()), reason: "unsupported algorithm"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := newJWKSVerifier(t, srv.URL, tc.cfg)
			c, err := v.Verify(t.Context(), tc.token)
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("Verify: %v (cause: %v)", err, errors.Unwrap(err))
				}
				if c.UserID != "user_1" || c.WorkspaceID != "ws-1" {
					t.Fatalf("claims = %+v", c)
				}
				return
			}
			wantRefusal(t, err, tc.reason)
		})
	}
}

func TestJWKSKeyRotation(t *testing.T) {
	old := rsaKey(t, "2026-02", jwt.SigningMethodRS256)
	next := ecKey(t, "2026-03", jwt.SigningMethodES256, elliptic.P256())
	srv := newJWKSServer(t, old)
	v := newJWKSVerifier(t, srv.URL, nil)
	if got := srv.hits.Load(); got != 1 {
		t.Fatalf("startup fetches = %d, want 1", got)
	}
	if _, err := v.Verify(t.Context(), old.sign(t, baseClaims())); err != nil {
		t.Fatalf("old key before rotation: %v", err)
	}

	// The issuer rotates: the new key appears and the old one is withdrawn.
	srv.publish(t, next)

	steps := []struct {
		name      string
		token     string
		reason    string
		wantFetch int64
	}{
		// An unknown kid triggers a refresh, which finds the new key.
		{name: "new key after refresh", token: next.sign(t, baseClaims()), wantFetch: 2},
		// That refresh replaced the set, so the withdrawn key no longer
		// verifies; and since one unknown-kid refresh just ran, this one does
		// not fetch again.
		{name: "withdrawn key", token: old.sign(t, baseClaims()), reason: "unknown signing key", wantFetch: 2},
		{name: "made-up kid is rate limited", token: signWith(t, jwt.SigningMethodES256, next.priv, baseClaims(), map[string]any{"kid": "made-up"}), reason: "unknown signing key", wantFetch: 2},
		{name: "new key from cache", token: next.sign(t, baseClaims()), wantFetch: 2},
	}
	for _, s := range steps {
		_, err := v.Verify(t.Context(), s.token)
		if s.reason == "" && err != nil {
			t.Fatalf("%s: %v (cause: %v)", s.name, err, errors.Unwrap(err))
		}
		if s.reason != "" {
			wantRefusal(t, err, s.reason)
		}
		if got := srv.hits.Load(); got != s.wantFetch {
			t.Fatalf("%s: fetches = %d, want %d", s.name, got, s.wantFetch)
		}
	}
}

func TestJWKSPeriodicRefreshDropsWithdrawnKey(t *testing.T) {
	old := ecKey(t, "old", jwt.SigningMethodES256, elliptic.P256())
	next := ecKey(t, "next", jwt.SigningMethodES256, elliptic.P256())
	srv := newJWKSServer(t, old, next)
	v := newJWKSVerifier(t, srv.URL, func(c *Config) { c.JWKSRefreshInterval = 5 * time.Millisecond })
	tok := old.sign(t, baseClaims())
	if _, err := v.Verify(t.Context(), tok); err != nil {
		t.Fatalf("before withdrawal: %v", err)
	}

	srv.publish(t, next)
	gen := srv.generation()
	// The refresh loop is sequential: once a fetch of the new set has been
	// served and the next fetch starts, the new set has been stored.
	srv.waitFetch(t, gen)
	srv.waitFetch(t, gen)

	_, err := v.Verify(t.Context(), tok)
	wantRefusal(t, err, "unknown signing key")
	if _, err := v.Verify(t.Context(), next.sign(t, baseClaims())); err != nil {
		t.Fatalf("remaining key: %v", err)
	}
}

func TestNewVerifierJWKSFailures(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()

	tests := []struct {
		name    string
		handler http.HandlerFunc
		url     string
		client  *http.Client
		check   func(t *testing.T, err error)
	}{
		{name: "server error", handler: func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "down", http.StatusInternalServerError) }},
		{name: "not JSON", handler: func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("<html>")) }},
		{name: "invalid key", handler: func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(`{"keys":[{"kty":"RSA","kid":"x","n":"!!","e":"AQAB"}]}`))
		}},
		{name: "oversized body", handler: func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(`{"keys":[],"pad":"` + strings.Repeat("A", maxJWKSBytes+1) + `"}`))
		}, check: func(t *testing.T, err error) {
			var mbe *http.MaxBytesError
			if !errors.As(err, &mbe) {
				t.Errorf("error %v is not the body limit", err)
			}
		}},
		{
			name: "slow server",
			handler: func(w http.ResponseWriter, r *http.Request) {
				<-r.Context().Done() // held until the client gives up
			},
			client: &http.Client{Timeout: 50 * time.Millisecond},
		},
		{name: "connection refused", url: closed.URL},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			url := tc.url
			if tc.handler != nil {
				s := httptest.NewServer(tc.handler)
				t.Cleanup(s.Close)
				url = s.URL
			}
			_, err := NewVerifier(t.Context(), Config{JWKSURL: url, HTTPClient: tc.client})
			if err == nil {
				t.Fatal("NewVerifier succeeded")
			}
			if errors.Is(err, ErrInvalidConfig) {
				t.Errorf("fetch failure %v reported as invalid config", err)
			}
			if tc.check != nil {
				tc.check(t, err)
			}
		})
	}
}

func TestNewVerifierLeavesCallerClientAlone(t *testing.T) {
	srv := newJWKSServer(t, ecKey(t, "k", jwt.SigningMethodES256, elliptic.P256()))
	client := &http.Client{}
	newJWKSVerifier(t, srv.URL, func(c *Config) { c.HTTPClient = client })
	if client.Transport != nil || client.Timeout != 0 {
		t.Fatalf("caller's client was modified: %+v", client)
	}
}

func TestVerifyConcurrentWithRefresh(t *testing.T) {
	k := ecKey(t, "k", jwt.SigningMethodES256, elliptic.P256())
	other := ecKey(t, "other", jwt.SigningMethodES256, elliptic.P256())
	srv := newJWKSServer(t, k)
	v := newJWKSVerifier(t, srv.URL, func(c *Config) {
		c.HS256Secret = testSecret()
		c.JWKSRefreshInterval = time.Millisecond
	})
	toks := []string{k.sign(t, baseClaims()), signHS(t, testSecret(), baseClaims())}

	var wg sync.WaitGroup
	errs := make(chan error, 8*50)
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				if g == 0 && i%10 == 0 {
					srv.publish(t, k, other) // the set changes under the readers
				}
				if _, err := v.Verify(t.Context(), toks[(g+i)%len(toks)]); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Verify: %v (cause: %v)", err, errors.Unwrap(err))
	}
}

func BenchmarkVerifyES256(b *testing.B) {
	k := ecKey(b, "k", jwt.SigningMethodES256, elliptic.P256())
	srv := newJWKSServer(b, k)
	v := newJWKSVerifier(b, srv.URL, nil)
	tok := k.sign(b, baseClaims())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(b.Context(), tok); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyRS256(b *testing.B) {
	k := rsaKey(b, "k", jwt.SigningMethodRS256)
	srv := newJWKSServer(b, k)
	v := newJWKSVerifier(b, srv.URL, nil)
	tok := k.sign(b, baseClaims())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(b.Context(), tok); err != nil {
			b.Fatal(err)
		}
	}
}
