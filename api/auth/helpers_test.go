package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// fixedNow is the clock every test verifies at.
func fixedNow() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }

func testSecret() []byte { return []byte("0123456789abcdef0123456789abcdef-test") }

// baseClaims are valid claims at t0; cases delete or override entries.
func baseClaims() jwt.MapClaims {
	t0 := fixedNow()
	return jwt.MapClaims{
		"sub":          "user_1",
		"workspace_id": "ws-1",
		"scope":        "events:read events:write",
		"iat":          t0.Add(-time.Minute).Unix(),
		"exp":          t0.Add(time.Hour).Unix(),
	}
}

// with returns baseClaims with edits applied; a nil value deletes the claim.
func with(edits map[string]any) jwt.MapClaims {
	c := baseClaims()
	for k, v := range edits {
		if v == nil {
			delete(c, k)
			continue
		}
		c[k] = v
	}
	return c
}

func signWith(t testing.TB, m jwt.SigningMethod, key any, claims jwt.MapClaims, header map[string]any) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, claims)
	for k, v := range header {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatalf("sign %s: %v", m.Alg(), err)
	}
	return s
}

func signHS(t testing.TB, secret []byte, claims jwt.MapClaims) string {
	t.Helper()
	return signWith(t, jwt.SigningMethodHS256, secret, claims, nil)
}

// noneToken is built by hand: the library refuses to produce alg "none"
// without a magic key, and an attacker would not use the library anyway.
func noneToken(t testing.TB, claims jwt.MapClaims) string {
	t.Helper()
	enc := base64.RawURLEncoding
	body, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	return enc.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + enc.EncodeToString(body) + "."
}

func newHSVerifier(t testing.TB, edit func(*Config)) *Verifier {
	t.Helper()
	cfg := Config{HS256Secret: testSecret(), Now: fixedNow}
	if edit != nil {
		edit(&cfg)
	}
	v, err := NewVerifier(t.Context(), cfg)
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	return v
}

// wantRefusal checks err wraps ErrUnauthorized with the given reason, and
// that its text is exactly that reason: nothing else may reach a client.
func wantRefusal(t testing.TB, err error, reason string) {
	t.Helper()
	if err == nil {
		t.Fatalf("verified, want refusal %q", reason)
	}
	if !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("error %v does not wrap ErrUnauthorized", err)
	}
	if got := Reason(err); got != reason {
		t.Fatalf("reason = %q, want %q (err: %v)", got, reason, errors.Unwrap(err))
	}
	if got, want := err.Error(), "unauthorized: "+reason; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

// testKey is a signing key with the kid and alg it is published under.
type testKey struct {
	kid    string
	method jwt.SigningMethod
	priv   crypto.Signer
}

func rsaKey(t testing.TB, kid string, m jwt.SigningMethod) testKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return testKey{kid: kid, method: m, priv: k}
}

func ecKey(t testing.TB, kid string, m jwt.SigningMethod, c elliptic.Curve) testKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(c, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return testKey{kid: kid, method: m, priv: k}
}

func (k testKey) sign(t testing.TB, claims jwt.MapClaims) string {
	t.Helper()
	return signWith(t, k.method, k.priv, claims, map[string]any{"kid": k.kid})
}

// jwk renders the public half the way issuers publish it. alg is left out
// on purpose: it is optional in JWKS, and the verifier must not need it.
func (k testKey) jwk(t testing.TB) map[string]string {
	t.Helper()
	enc := base64.RawURLEncoding
	switch pub := k.priv.Public().(type) {
	case *rsa.PublicKey:
		return map[string]string{
			"kty": "RSA", "kid": k.kid, "use": "sig",
			"n": enc.EncodeToString(pub.N.Bytes()),
			"e": enc.EncodeToString(big.NewInt(int64(pub.E)).Bytes()),
		}
	case *ecdsa.PublicKey:
		raw, err := pub.Bytes() // 0x04 || X || Y, each padded to the curve size
		if err != nil {
			t.Fatal(err)
		}
		n := (len(raw) - 1) / 2
		return map[string]string{
			"kty": "EC", "kid": k.kid, "use": "sig", "crv": pub.Curve.Params().Name,
			"x": enc.EncodeToString(raw[1 : 1+n]),
			"y": enc.EncodeToString(raw[1+n:]),
		}
	default:
		t.Fatalf("unsupported key %T", pub)
		return nil
	}
}

// jwksServer publishes a key set the test can swap, and reports each fetch
// with the generation of the set it served.
type jwksServer struct {
	*httptest.Server
	hits    atomic.Int64
	fetched chan int

	mu   sync.Mutex
	body []byte
	gen  int
}

func newJWKSServer(t testing.TB, keys ...testKey) *jwksServer {
	t.Helper()
	s := &jwksServer{fetched: make(chan int, 64)}
	s.publish(t, keys...)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.mu.Lock()
		body, gen := s.body, s.gen
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
		select {
		case s.fetched <- gen:
		default: // nobody is waiting; the count in hits is enough
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) publish(t testing.TB, keys ...testKey) {
	t.Helper()
	set := struct {
		Keys []map[string]string `json:"keys"`
	}{Keys: []map[string]string{}}
	for _, k := range keys {
		set.Keys = append(set.Keys, k.jwk(t))
	}
	body, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.body = body
	s.gen++
	s.mu.Unlock()
}

func (s *jwksServer) generation() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// waitFetch blocks until the server serves generation gen or later.
func (s *jwksServer) waitFetch(t testing.TB, gen int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case g := <-s.fetched:
			if g >= gen {
				return
			}
		case <-timeout:
			t.Fatalf("JWKS generation %d never fetched", gen)
		}
	}
}

func newJWKSVerifier(t testing.TB, url string, edit func(*Config)) *Verifier {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	cfg := Config{JWKSURL: url, Now: fixedNow}
	if edit != nil {
		edit(&cfg)
	}
	v, err := NewVerifier(ctx, cfg)
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	return v
}

func repeat(s string, n int) string { return strings.Repeat(s, n) }

func debugLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
