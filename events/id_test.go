package events

import (
	"strconv"
	"strings"
	"testing"
)

// TestNameUUIDVersion5 holds nameUUID to RFC 9562's version 5 with known
// answers: the RFC's own example (the DNS namespace, "www.example.com")
// and one more namespace, each computed by another implementation
// (Python's uuid.uuid5).
func TestNameUUIDVersion5(t *testing.T) {
	for _, tc := range []struct{ namespace, name, want string }{
		{"6ba7b810-9dad-11d1-80b4-00c04fd430c8", "www.example.com", "2ed6657d-e927-568b-95e1-2665a8aea6a2"},
		{"6ba7b811-9dad-11d1-80b4-00c04fd430c8", "https://example.com/", "dd2c1780-811a-5296-81c5-178a0ef488bc"},
	} {
		ns, ok := ParseUUID(tc.namespace)
		if !ok {
			t.Fatalf("namespace %q does not parse", tc.namespace)
		}
		if got := nameUUID(ns, tc.name).String(); got != tc.want {
			t.Errorf("v5(%s, %q) = %s, want %s", tc.namespace, tc.name, got, tc.want)
		}
	}
}

// TestNameUUID pins the UUIDs of Astro's namespace: upstream services
// compute them too, and stored ids depend on them, so a change to the
// namespace or the algorithm must fail here. The wanted values come from
// Python's uuid.uuid5 with NameNamespace.
func TestNameUUID(t *testing.T) {
	if u, ok := ParseUUID(NameNamespace); !ok || u.String() != NameNamespace {
		t.Fatalf("NameNamespace %q is not a canonical lower-case UUID", NameNamespace)
	}
	for _, tc := range []struct{ name, want string }{
		{"bob", "03f5eda1-f39a-50ac-aeb5-1834e4a7bf6c"},
		{"Bob", "7317bfdf-e1e9-5443-80cc-41f024767bd3"}, // names are case-sensitive
		{"res-000", "99178ac4-be23-5b7d-8d4d-264ca28e8bff"},
		{"7", "a835367d-666a-51a5-9822-32a35a68e7c1"},
		{"42", "cec6663a-faab-5b8a-a9b8-cd31004901ee"},
		{"é", "1d0412ea-b3b0-5fd3-8f47-53405f79e3ca"}, // its UTF-8 bytes
	} {
		got := NameUUID(tc.name)
		if got != tc.want {
			t.Errorf("NameUUID(%q) = %s, want %s", tc.name, got, tc.want)
		}
		if got[14] != '5' || !strings.ContainsRune("89ab", rune(got[19])) {
			t.Errorf("NameUUID(%q) = %s: not version 5 of the RFC variant", tc.name, got)
		}
	}
}

func TestUUIDFor(t *testing.T) {
	const id = "123e4567-e89b-12d3-a456-426614174000"
	for _, tc := range []struct {
		id, want string // want "" for refused
	}{
		{id, id},
		{strings.ToUpper(id), id},
		{"bob", "03f5eda1-f39a-50ac-aeb5-1834e4a7bf6c"},
		{"res-000", "99178ac4-be23-5b7d-8d4d-264ca28e8bff"},
		{"Bob Smith", NameUUID("Bob Smith")},
		{"日本", NameUUID("日本")},
		{strings.Repeat("é", MaxNameLen), NameUUID(strings.Repeat("é", MaxNameLen))}, // characters, not bytes
		{"", ""},
		{" ", ""},
		{"\u00a0", ""}, // a no-break space is white space too
		{" bob", ""},
		{"bob ", ""},
		{"bob\n", ""},
		{"b\x00b", ""},
		{"b\tb", ""},
		{"b\u0085b", ""}, // C1 control
		{"b\xffb", ""},
		{strings.Repeat("x", MaxNameLen+1), ""},
		{"{" + id + "}", ""},
		{"urn:uuid:" + id, ""},
		{"URN:UUID:" + strings.ToUpper(id), ""},
		{strings.ReplaceAll(id, "-", ""), ""},
		{"{" + strings.ReplaceAll(id, "-", "") + "}", ""},
		{" " + id, ""},
		{id[:35], NameUUID(id[:35])}, // one digit short: just a name
	} {
		got, ok := UUIDFor(tc.id)
		if ok != (tc.want != "") || got != tc.want {
			t.Errorf("UUIDFor(%q) = %q, %v; want %q", tc.id, got, ok, tc.want)
		}
		kept := tc.want
		if kept == "" {
			kept = tc.id // left as it came, for the command to refuse
		}
		if got := UpstreamID(tc.id); got != kept {
			t.Errorf("UpstreamID(%q) = %q, want %q", tc.id, got, kept)
		}
	}
}

// TestNameRuleSaysMaxNameLen: the rule in words names the limit in code.
func TestNameRuleSaysMaxNameLen(t *testing.T) {
	if !strings.Contains(NameRule, " "+strconv.Itoa(MaxNameLen)+" characters") {
		t.Fatalf("NameRule %q does not say %d characters", NameRule, MaxNameLen)
	}
}
