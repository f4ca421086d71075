package auth

import (
	"testing"
	"time"
)

// TestClaimNamesAreCaseSensitive: RFC 7519 claim names are case-sensitive,
// but the payload was decoded with encoding/json, which matches field names
// case-insensitively, so a token carrying only "SUB" and "Workspace_ID"
// verified as that user in that workspace.
func TestClaimNamesAreCaseSensitive(t *testing.T) {
	t0 := fixedNow()
	tests := []struct {
		name   string
		cfg    func(*Config)
		edits  map[string]any
		reason string // "" means it must verify
		check  func(t *testing.T, c Claims)
	}{
		{name: "SUB", edits: map[string]any{"sub": nil, "SUB": "admin"}, reason: "missing sub claim"},
		{name: "Sub", edits: map[string]any{"sub": nil, "Sub": "admin"}, reason: "missing sub claim"},
		{name: "Workspace_ID", edits: map[string]any{"workspace_id": nil, "Workspace_ID": "ws-victim"}, reason: "missing workspace_id claim"},
		{name: "WORKSPACE_ID", edits: map[string]any{"workspace_id": nil, "WORKSPACE_ID": "ws-victim"}, reason: "missing workspace_id claim"},
		{name: "EXP", edits: map[string]any{"exp": nil, "EXP": t0.Add(time.Hour).Unix()}, reason: "missing exp claim"},
		{name: "ISS", cfg: issAud, edits: map[string]any{"ISS": "https://id.example", "aud": "astro-api"}, reason: "missing iss claim"},
		{name: "AUD", cfg: issAud, edits: map[string]any{"iss": "https://id.example", "AUD": "astro-api"}, reason: "missing aud claim"},
		{
			name:  "SCOPE and Scope",
			edits: map[string]any{"scope": nil, "SCOPE": "data:erase", "Scope": "notifications:send"},
			check: func(t *testing.T, c Claims) {
				if len(c.Scopes) != 0 {
					t.Errorf("scopes = %q, want none", c.Scopes)
				}
			},
		},
		{
			name:  "variants beside the claims",
			edits: map[string]any{"SUB": "admin", "Workspace_ID": "ws-victim", "Scope": "data:erase", "NBF": t0.Add(time.Hour).Unix()},
			check: func(t *testing.T, c Claims) {
				if c.UserID != "user_1" || c.WorkspaceID != "ws-1" || c.HasScope("data:erase") {
					t.Errorf("claims = %+v", c)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := newHSVerifier(t, tc.cfg)
			c, err := v.Verify(t.Context(), signHS(t, testSecret(), with(tc.edits)))
			if tc.reason != "" {
				wantRefusal(t, err, tc.reason)
				return
			}
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			tc.check(t, c)
		})
	}
}
