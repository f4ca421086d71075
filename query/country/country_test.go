package country

import "testing"

func TestTable(t *testing.T) {
	if len(table) != 249 {
		t.Errorf("%d codes, want 249", len(table))
	}
	for i, c := range table {
		if len(c.code) != 2 || c.code[0] < 'A' || c.code[0] > 'Z' || c.code[1] < 'A' || c.code[1] > 'Z' || c.name == "" {
			t.Errorf("bad entry %q", c)
		}
		if i > 0 && table[i-1].code >= c.code {
			t.Errorf("%s not after %s: binary search needs sorted codes", c.code, table[i-1].code)
		}
	}
}

func TestName(t *testing.T) {
	cases := []struct {
		code string
		name string
		ok   bool
	}{
		{"GB", "United Kingdom", true},
		{"US", "United States", true},
		{"DE", "Germany", true},
		{"AD", "Andorra", true},
		{"ZW", "Zimbabwe", true},
		{"AX", "Åland Islands", true},
		{"CI", "Côte d'Ivoire", true},
		{"gb", "", false},
		{"Gb", "", false},
		{"XX", "", false},
		{"UK", "", false},
		{"EU", "", false},
		{"AA", "", false},
		{"ZZ", "", false},
		{"GBR", "", false},
		{"G", "", false},
		{"", "", false},
	}
	for _, c := range cases {
		name, ok := Name(c.code)
		if name != c.name || ok != c.ok {
			t.Errorf("Name(%q) = %q, %v; want %q, %v", c.code, name, ok, c.name, c.ok)
		}
		if Valid(c.code) != c.ok {
			t.Errorf("Valid(%q) = %v", c.code, !c.ok)
		}
	}
}

func TestAll(t *testing.T) {
	n := 0
	for code, name := range All() {
		if got, _ := Name(code); got != name {
			t.Errorf("All yielded %s=%q, Name says %q", code, name, got)
		}
		n++
	}
	if n != len(table) {
		t.Errorf("All yielded %d, want %d", n, len(table))
	}
	for range All() {
		break // stopping early must not panic
	}
}
