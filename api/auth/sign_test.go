package auth

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestSign(t *testing.T) {
	secret := testSecret()
	now := fixedNow()
	valid := Claims{UserID: "u1", WorkspaceID: "ws_1", Scopes: []string{"events:read", "admin"}}

	tests := []struct {
		name    string
		secret  []byte
		claims  Claims
		ttl     time.Duration
		wantErr error
	}{
		{name: "valid", secret: secret, claims: valid, ttl: 24 * time.Hour},
		{name: "no scopes", secret: secret, claims: Claims{UserID: "u1", WorkspaceID: "w1"}, ttl: time.Minute},
		{name: "with iss aud jti", secret: secret, claims: Claims{UserID: "u1", WorkspaceID: "w1", Issuer: "astro-dev", Audience: []string{"astro-api"}, ID: "t-1"}, ttl: time.Hour},
		{name: "short secret", secret: []byte("short"), claims: valid, ttl: time.Hour, wantErr: ErrInvalidConfig},
		{name: "zero ttl", secret: secret, claims: valid, ttl: 0, wantErr: ErrInvalidClaims},
		{name: "negative ttl", secret: secret, claims: valid, ttl: -time.Hour, wantErr: ErrInvalidClaims},
		{name: "missing user", secret: secret, claims: Claims{WorkspaceID: "w1"}, ttl: time.Hour, wantErr: ErrInvalidClaims},
		{name: "bad user", secret: secret, claims: Claims{UserID: "a.b", WorkspaceID: "w1"}, ttl: time.Hour, wantErr: ErrInvalidClaims},
		{name: "missing workspace", secret: secret, claims: Claims{UserID: "u1"}, ttl: time.Hour, wantErr: ErrInvalidClaims},
		{name: "wildcard workspace", secret: secret, claims: Claims{UserID: "u1", WorkspaceID: ">"}, ttl: time.Hour, wantErr: ErrInvalidClaims},
		{name: "scope with space", secret: secret, claims: Claims{UserID: "u1", WorkspaceID: "w1", Scopes: []string{"a b"}}, ttl: time.Hour, wantErr: ErrInvalidClaims},
		{name: "empty scope", secret: secret, claims: Claims{UserID: "u1", WorkspaceID: "w1", Scopes: []string{""}}, ttl: time.Hour, wantErr: ErrInvalidClaims},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := Sign(tc.secret, tc.claims, now, tc.ttl)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Sign error = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Sign: %v", err)
			}
			v := newHSVerifier(t, func(c *Config) {
				c.HS256Secret = tc.secret
				c.Issuer, c.Audience = tc.claims.Issuer, ""
				if len(tc.claims.Audience) > 0 {
					c.Audience = tc.claims.Audience[0]
				}
			})
			got, err := v.Verify(t.Context(), tok)
			if err != nil {
				t.Fatalf("Verify(Sign(...)): %v (cause: %v)", err, errors.Unwrap(err))
			}
			if got.UserID != tc.claims.UserID || got.WorkspaceID != tc.claims.WorkspaceID || got.ID != tc.claims.ID ||
				got.Issuer != tc.claims.Issuer || !slices.Equal(got.Audience, tc.claims.Audience) {
				t.Errorf("round trip = %+v, want %+v", got, tc.claims)
			}
			if len(got.Scopes) != len(tc.claims.Scopes) || (len(got.Scopes) > 0 && !slices.Equal(got.Scopes, tc.claims.Scopes)) {
				t.Errorf("scopes = %q, want %q", got.Scopes, tc.claims.Scopes)
			}
			if !got.IssuedAt.Equal(now) || !got.ExpiresAt.Equal(now.Add(tc.ttl)) {
				t.Errorf("iat/exp = %v/%v, want %v/%v", got.IssuedAt, got.ExpiresAt, now, now.Add(tc.ttl))
			}
		})
	}
}

func TestSignedTokenExpires(t *testing.T) {
	tok, err := Sign(testSecret(), Claims{UserID: "u", WorkspaceID: "w"}, fixedNow().Add(-2*time.Hour), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_, err = newHSVerifier(t, nil).Verify(t.Context(), tok)
	wantRefusal(t, err, "token expired")
}
