package country

import "testing"

func TestTable(t *testing.T) {
	if len(table) != 249 {
		t.Errorf("%d codes, want 249", len(table))
	}
	for i, c := range table {
		if len(c.code) != 2 || c.code[0] < 'A' || c.code[0] > 'Z' || c.code[1] < 'A' || c.code[1] > 'Z' || c.name == "" || c.num < 1 || c.num > 999 {
			t.Errorf("bad entry %+v", c)
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
	nums := map[int]string{}
	for c := range All() {
		if got, _ := Name(c.Code); got != c.Name {
			t.Errorf("All yielded %s=%q, Name says %q", c.Code, c.Name, got)
		}
		if got, _ := Numeric(c.Code); got != c.Numeric {
			t.Errorf("All yielded %s=%d, Numeric says %d", c.Code, c.Numeric, got)
		}
		if other, dup := nums[c.Numeric]; dup {
			t.Errorf("%s and %s share the numeric code %d", other, c.Code, c.Numeric)
		}
		nums[c.Numeric] = c.Code
		n++
	}
	if n != len(table) {
		t.Errorf("All yielded %d, want %d", n, len(table))
	}
	for range All() {
		break // stopping early must not panic
	}
}

// TestNumeric: the public API's CountryHolidayDto.countryId is the ISO
// 3166-1 numeric code.
func TestNumeric(t *testing.T) {
	for _, c := range []struct {
		code string
		num  int
		ok   bool
	}{
		{"GB", 826, true}, {"US", 840, true}, {"DE", 276, true}, {"FR", 250, true}, {"AD", 20, true},
		{"AX", 248, true}, {"ZW", 716, true}, {"JP", 392, true}, {"IN", 356, true}, {"BR", 76, true},
		{"gb", 0, false}, {"UK", 0, false}, {"", 0, false},
	} {
		if num, ok := Numeric(c.code); num != c.num || ok != c.ok {
			t.Errorf("Numeric(%q) = %d, %v; want %d, %v", c.code, num, ok, c.num, c.ok)
		}
	}
}
