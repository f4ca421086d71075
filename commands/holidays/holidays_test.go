package holidays

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"astro/commands"
	"astro/events"
)

func validCountry(c string) bool { return c == "GB" || c == "DE" }

func ptr(s string) *string { return &s }

func TestCreateValidation(t *testing.T) {
	base := Create{Reason: ptr(" Boxing Day "), Type: "Country", DateFrom: "2027-12-26T00:00:00", DateTo: "2027-12-27", CountryIDs: []string{"gb", "GB"}}
	got, err := base.validate(validCountry)
	if err != nil {
		t.Fatal(err)
	}
	if got.Reason != "Boxing Day" || got.Type != events.HolidayCountry || got.DateFrom != "2027-12-26" ||
		len(got.CountryIDs) != 1 || got.CountryIDs[0] != "GB" || got.ResourceIDs == nil {
		t.Fatalf("normalised: %+v", got)
	}
	cases := []struct {
		name  string
		mod   func(*Create)
		field string
	}{
		{"no reason", func(c *Create) { c.Reason = nil }, "reason"},
		{"blank reason", func(c *Create) { c.Reason = ptr("  ") }, "reason"},
		{"long reason", func(c *Create) { c.Reason = ptr(string(make([]rune, MaxReasonLen+1))) }, "reason"},
		{"control character", func(c *Create) { c.Reason = ptr("a\tb") }, "reason"},
		{"no type", func(c *Create) { c.Type = "" }, "type"},
		{"unknown type", func(c *Create) { c.Type = "lunar" }, "type"},
		{"impossible date", func(c *Create) { c.DateFrom = "2027-02-30" }, "dateFrom"},
		{"before 1900", func(c *Create) { c.DateFrom = "1899-12-31" }, "dateFrom"},
		{"reversed", func(c *Create) { c.DateTo = "2027-12-01" }, "dateTo"},
		{"too long", func(c *Create) { c.DateTo = "2028-12-27" }, "dateTo"},
		{"unknown country", func(c *Create) { c.CountryIDs = []string{"XX"} }, "countryId"},
		{"country holiday without countries", func(c *Create) { c.CountryIDs = nil }, "countryId"},
		{"global with countries", func(c *Create) { c.Type = "global" }, "countryId"},
		{"people without resources", func(c *Create) { c.Type = "people"; c.CountryIDs = nil }, "resources"},
		{"bad resource id", func(c *Create) { c.Type = "people"; c.CountryIDs = nil; c.ResourceIDs = []string{"a.b"} }, "resources"},
		// The public document's ResourceHolidayDto.resourceId is a uuid.
		{"resource id not a uuid", func(c *Create) { c.Type = "people"; c.CountryIDs = nil; c.ResourceIDs = []string{"r-gb-1"} }, "resources"},
	}
	people := Create{Reason: ptr("Offsite"), Type: "people", DateFrom: "2027-03-01", DateTo: "2027-03-01",
		ResourceIDs: []string{" 123E4567-E89B-12D3-A456-426614174000 ", "123e4567-e89b-12d3-a456-426614174000"}}
	if got, err := people.validate(validCountry); err != nil || len(got.ResourceIDs) != 1 || got.ResourceIDs[0] != "123e4567-e89b-12d3-a456-426614174000" {
		t.Fatalf("resource ids are UUIDs in either case, stored lower-cased once: %+v, %v", got.ResourceIDs, err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.mod(&c)
			_, err := c.validate(validCountry)
			e, ok := err.(*commands.Error)
			if !ok || e.Code != commands.EInvalid || len(e.Fields[tc.field]) == 0 {
				t.Fatalf("want validationErrors.%s, got %v", tc.field, err)
			}
		})
	}
}

func TestRenameDecisions(t *testing.T) {
	h := NewHoliday()
	if _, err := h.Rename("h1", "x"); commands.ErrorCode(err) != commands.ENotFound {
		t.Fatalf("rename before creation: %v", err)
	}
	created, _ := events.New("e1", events.Meta{WorkspaceID: "w", Time: time.Now()}, events.Aggregate{Kind: events.KindHoliday, ID: "h1"},
		events.HolidayCreated{HolidayID: "h1", Reason: "Old", Type: events.HolidayGlobal, DateFrom: "2027-01-01", DateTo: "2027-01-01"})
	if err := h.Apply(created); err != nil {
		t.Fatal(err)
	}
	if ps, err := h.Rename("h1", "Old"); err != nil || len(ps) != 0 {
		t.Fatalf("rename to the current name: %v %v", ps, err)
	}
	ps, err := h.Rename("h1", "New")
	r, ok := ps[0].(events.HolidayRenamed)
	if err != nil || !ok || r.OldReason != "Old" || r.NewReason != "New" {
		t.Fatalf("rename: %+v %v", ps, err)
	}
}

// TestCreatedAs: a create under a used key is the same request only if
// it asks for the holiday as it was created, a rename since or not.
func TestCreatedAs(t *testing.T) {
	first := events.HolidayCreated{HolidayID: "h1", Reason: "Old", Type: events.HolidayPeople, DateFrom: "2027-01-01", DateTo: "2027-01-02",
		CountryIDs: []string{}, ResourceIDs: []string{"r1", "r2"}}
	h := NewHoliday()
	created, _ := events.New("e1", events.Meta{WorkspaceID: "w", Time: time.Now()}, events.Aggregate{Kind: events.KindHoliday, ID: "h1"}, first)
	renamed, _ := events.New("e2", events.Meta{WorkspaceID: "w", Time: time.Now()}, events.Aggregate{Kind: events.KindHoliday, ID: "h1"},
		events.HolidayRenamed{HolidayID: "h1", OldReason: "Old", NewReason: "New"})
	if h.CreatedAs(first) {
		t.Fatal("a holiday not created yet was created as asked")
	}
	for _, e := range []events.Event{created, renamed} {
		if err := h.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		change func(*events.HolidayCreated)
		same   bool
	}{
		{"the same", func(*events.HolidayCreated) {}, true},
		{"another reason", func(c *events.HolidayCreated) { c.Reason = "New" }, false},
		{"another type", func(c *events.HolidayCreated) { c.Type = events.HolidayGlobal }, false},
		{"another start", func(c *events.HolidayCreated) { c.DateFrom = "2026-12-31" }, false},
		{"another end", func(c *events.HolidayCreated) { c.DateTo = "2027-01-03" }, false},
		{"other countries", func(c *events.HolidayCreated) { c.CountryIDs = []string{"GB"} }, false},
		{"other resources", func(c *events.HolidayCreated) { c.ResourceIDs = []string{"r2", "r1"} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := first
			tc.change(&c)
			if got := h.CreatedAs(c); got != tc.same {
				t.Fatalf("CreatedAs %+v: %v, want %v", c, got, tc.same)
			}
		})
	}
	// A snapshot from before CreatedReason was kept: the reason cannot be
	// told, the rest can.
	old := *h
	old.CreatedReason = ""
	if !old.CreatedAs(first) {
		t.Fatal("a holiday from an old snapshot refused its own create")
	}
}

// TestCreateBoundsLists: a 256 KiB body holds tens of thousands of list
// entries. A create with too many is refused before any entry is read (they
// were de-duplicated pairwise first: seconds of CPU), and bad entries are
// named a few at a time (each had a message: answers of megabytes).
func TestCreateBoundsLists(t *testing.T) {
	list := func(n int, format string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf(format, i)
		}
		return out
	}
	people := Create{Reason: ptr("Offsite"), Type: "people", DateFrom: "2027-03-01", DateTo: "2027-03-01"}
	doubled := append(list(500, "abcdef00-0000-4000-8000-%012d"), list(500, "ABCDEF00-0000-4000-8000-%012d")...)
	cases := []struct {
		name  string
		mod   func(*Create)
		field string // "": accepted
		count int    // the field's messages
		last  string // the field's last message
		ids   int    // resource ids kept
	}{
		{"50,000 names", func(c *Create) { c.ResourceIDs = list(50000, "r%d") }, "resources", 1, "At most 1000 resources.", 0},
		{"50,000 UUIDs", func(c *Create) { c.ResourceIDs = list(50000, "00000000-0000-4000-8000-%012d") }, "resources", 1, "At most 1000 resources.", 0},
		{"50,000 names on a global holiday", func(c *Create) { c.Type = "global"; c.ResourceIDs = list(50000, "r%d") }, "resources", 1,
			"Only people holidays have assigned resources; global and country holidays apply to every resource in scope.", 0},
		{"1,000 bad names", func(c *Create) { c.ResourceIDs = list(1000, "r%d") }, "resources", maxEntryMessages + 1, "Further invalid entries not listed: 990.", 0},
		{"11 bad names", func(c *Create) { c.ResourceIDs = list(11, "r%d") }, "resources", maxEntryMessages + 1, "Further invalid entries not listed: 1.", 0},
		{"10 bad names", func(c *Create) { c.ResourceIDs = list(10, "r%d") }, "resources", maxEntryMessages,
			`"r9" is not a resource id: a UUID, or another id (named by its name-based UUID) of ` + events.NameRule + ".", 0},
		// A long entry is quoted short: ten of 25 KB would make an answer
		// (and an Idempotency-Key record) of a quarter of a megabyte.
		{"10 long bad names", func(c *Create) { c.ResourceIDs = list(10, "%d"+strings.Repeat("é<", 8000)) }, "resources", maxEntryMessages,
			`"9` + strings.Repeat("é<", 21) + `…" is not a resource id: a UUID, or another id (named by its name-based UUID) of ` + events.NameRule + ".", 0},
		{"5,000 bad countries", func(c *Create) { c.Type = "country"; c.CountryIDs = list(5000, "X%d") }, "countryId", maxEntryMessages + 1, "Further invalid entries not listed: 4990.", 0},
		{"1,000 entries naming 500 resources", func(c *Create) { c.ResourceIDs = doubled }, "", 0, "", 500},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := people
			tc.mod(&c)
			got, err := c.validate(validCountry)
			if tc.field == "" {
				if err != nil || len(got.ResourceIDs) != tc.ids {
					t.Fatalf("want accepted with %d resources, got %d, %v", tc.ids, len(got.ResourceIDs), err)
				}
				return
			}
			e, ok := err.(*commands.Error)
			if !ok || e.Code != commands.EInvalid {
				t.Fatalf("want validationErrors.%s, got %v", tc.field, err)
			}
			msgs := e.Fields[tc.field]
			if len(msgs) != tc.count || msgs[len(msgs)-1] != tc.last {
				t.Fatalf("validationErrors.%s: %d messages, last %q; want %d, last %q", tc.field, len(msgs), msgs[len(msgs)-1], tc.count, tc.last)
			}
			if len(got.ResourceIDs) != tc.ids {
				t.Fatalf("%d resource ids kept, want %d: entries past the limit are not read", len(got.ResourceIDs), tc.ids)
			}
		})
	}
}

// TestHolidaySize: the command store's cache bounds its bytes by what
// aggregates say they hold, and counts one that says nothing as 256 bytes;
// a holiday of 1,000 resources holds some 55 KB.
func TestHolidaySize(t *testing.T) {
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
	}
	full := &Holiday{Created: true, Reason: "Offsite", Type: events.HolidayPeople, DateFrom: "2027-03-01", DateTo: "2027-03-01",
		CountryIDs: []string{}, ResourceIDs: ids}
	cases := []struct {
		name     string
		h        *Holiday
		min, max int
	}{
		{"not created", NewHoliday(), 1, 255},
		{"global", &Holiday{Created: true, Reason: "New Year", Type: events.HolidayGlobal, DateFrom: "2027-01-01", DateTo: "2027-01-01"}, 1, 255},
		{"1,000 resources", full, 36000, 100000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, ok := any(tc.h).(commands.Sizer)
			if !ok {
				t.Fatal("a holiday does not say its size: the cache counts it as 256 bytes")
			}
			if n := s.Size(); n < tc.min || n > tc.max {
				t.Fatalf("Size() = %d, want %d to %d", n, tc.min, tc.max)
			}
		})
	}
}

// TestDateTimeIsCutToItsDate: a date-time's date is taken, as clients with
// only date-times send midnight; anything after a T that is no time was
// taken too ("2027-03-02Tnonsense").
func TestDateTimeIsCutToItsDate(t *testing.T) {
	for in, ok := range map[string]bool{
		"2027-03-02": true, "2027-03-02T00:00:00": true, "2027-03-02T00:00:00Z": true,
		"2027-03-02T00:00:00.000Z": true, "2027-03-02T00:00:00+01:00": true, "2027-03-02T00:00": true,
		"2027-03-02Tnonsense": false, "2027-03-02T": false, "2027-03-02T25:00:00": false, "2027-03-02T00:00:00Zjunk": false,
	} {
		v := commands.Validation{}
		d, got := parseDate(v, "dateFrom", in)
		if got != ok || ok && d.Format(time.DateOnly) != "2027-03-02" || !ok && len(v["dateFrom"]) != 1 {
			t.Errorf("%q: %v, %v, %v; want ok=%v", in, d, got, v, ok)
		}
	}
}
