package holidays

import (
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
