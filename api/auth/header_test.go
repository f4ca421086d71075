package auth

import (
	"errors"
	"testing"
)

func TestFromHeader(t *testing.T) {
	tests := []struct {
		name   string
		header string
		want   string
		reason string // "" means success
	}{
		{name: "bearer", header: "Bearer abc.def.ghi", want: "abc.def.ghi"},
		{name: "lower case scheme", header: "bearer abc.def.ghi", want: "abc.def.ghi"},
		{name: "upper case scheme", header: "BEARER abc.def.ghi", want: "abc.def.ghi"},
		{name: "surrounding spaces", header: "  Bearer   abc.def.ghi  ", want: "abc.def.ghi"},
		{name: "tab separator", header: "Bearer\tabc.def.ghi", want: "abc.def.ghi"},
		// Not HTTP white space: kept, so the token fails verification.
		{name: "ideographic space", header: "Bearer abc.def.ghi\u3000", want: "abc.def.ghi\u3000"},
		{name: "empty", header: "", reason: "missing authorization header"},
		{name: "only spaces", header: "   ", reason: "missing authorization header"},
		{name: "scheme only", header: "Bearer", reason: "missing bearer token"},
		{name: "scheme and spaces", header: "Bearer    ", reason: "missing bearer token"},
		{name: "basic", header: "Basic dXNlcjpwYXNz", reason: "unsupported authorization scheme"},
		{name: "token without scheme", header: "abc.def.ghi", reason: "unsupported authorization scheme"},
		{name: "scheme prefix", header: "Bearerabc.def.ghi", reason: "unsupported authorization scheme"},
		{name: "two tokens", header: "Bearer abc def", reason: "malformed authorization header"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FromHeader(tc.header)
			if tc.reason != "" {
				wantRefusal(t, err, tc.reason)
				if got != "" {
					t.Errorf("token = %q on error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("FromHeader(%q): %v", tc.header, err)
			}
			if got != tc.want {
				t.Fatalf("FromHeader(%q) = %q, want %q", tc.header, got, tc.want)
			}
		})
	}
}

func TestFromHeaderThenVerify(t *testing.T) {
	v := newHSVerifier(t, nil)
	tok, err := FromHeader("bearer " + signHS(t, testSecret(), baseClaims()) + " ")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(t.Context(), tok); err != nil {
		t.Fatalf("Verify: %v (cause: %v)", err, errors.Unwrap(err))
	}
}
