package holidays

import (
	"fmt"
	"slices"

	"astro/commands"
	"astro/events"
)

// Snapshot names of the holiday package's aggregates; a new state shape
// gets a new name, so old snapshots are ignored instead of misread.
const (
	HolidaySnapshotName  = "holiday.v1"
	ResourceSnapshotName = "resource.v1"
)

// Holiday is the state a holiday command is decided against.
type Holiday struct {
	Created     bool     `json:"created"`
	Reason      string   `json:"reason"`
	Type        string   `json:"type"`
	DateFrom    string   `json:"dateFrom"`
	DateTo      string   `json:"dateTo"`
	CountryIDs  []string `json:"countryIds"`
	ResourceIDs []string `json:"resourceIds"`
	// CreatedReason is the reason as created, before any rename: with the
	// fields a rename leaves alone, what a create under the same
	// Idempotency-Key must match. Snapshots from before it have none.
	CreatedReason string `json:"createdReason,omitempty"`
}

// NewHoliday returns the state of a holiday that does not exist yet.
func NewHoliday() *Holiday { return &Holiday{} }

// Size is the holiday's memory in bytes, for the aggregate cache's budget:
// a people holiday's resource ids (up to 1,000 of them, 52 bytes each with
// their string headers) are most of it, where the cache would otherwise
// count a fixed 256.
func (h *Holiday) Size() int {
	const (
		header    = 136 // the struct: a bool, five strings, two slices
		stringHdr = 16
	)
	n := header + len(h.Reason) + len(h.Type) + len(h.DateFrom) + len(h.DateTo) + len(h.CreatedReason)
	for _, ids := range [][]string{h.CountryIDs, h.ResourceIDs} {
		n += cap(ids) * stringHdr
		for _, id := range ids {
			n += len(id)
		}
	}
	return n
}

// Apply implements commands.Aggregate.
func (h *Holiday) Apply(e events.Event) error {
	p, err := events.Decode(e)
	if err != nil {
		return err
	}
	switch p := p.(type) {
	case *events.HolidayCreated:
		*h = Holiday{Created: true, Reason: p.Reason, Type: p.Type, DateFrom: p.DateFrom, DateTo: p.DateTo,
			CountryIDs: p.CountryIDs, ResourceIDs: p.ResourceIDs, CreatedReason: p.Reason}
	case *events.HolidayRenamed:
		h.Reason = p.NewReason
	default:
		return fmt.Errorf("holiday: unexpected event %s", e.Type)
	}
	return nil
}

// CreatedAs reports whether the holiday was created as c: a create under
// the same Idempotency-Key (so the same id) is the same request only then.
func (h *Holiday) CreatedAs(c events.HolidayCreated) bool {
	return h.Created && (h.CreatedReason == "" || h.CreatedReason == c.Reason) &&
		h.Type == c.Type && h.DateFrom == c.DateFrom && h.DateTo == c.DateTo &&
		slices.Equal(h.CountryIDs, c.CountryIDs) && slices.Equal(h.ResourceIDs, c.ResourceIDs)
}

// Rename decides a new reason: nothing when it is the current one.
func (h *Holiday) Rename(id, reason string) ([]events.Payload, error) {
	if !h.Created {
		return nil, commands.Errorf(commands.ENotFound, "The holiday was not found.")
	}
	if reason == h.Reason {
		return nil, nil
	}
	return []events.Payload{events.HolidayRenamed{HolidayID: id, OldReason: h.Reason, NewReason: reason}}, nil
}

// Resource is the state of a resource.
type Resource struct {
	Exists      bool   `json:"exists"`
	Name        string `json:"name"`
	CountryCode string `json:"countryCode"`
	IsActive    bool   `json:"isActive"`
	IsGuest     bool   `json:"isGuest"`
}

// NewResource returns the state of a resource not seen yet.
func NewResource() *Resource { return &Resource{} }

// Apply implements commands.Aggregate.
func (r *Resource) Apply(e events.Event) error {
	p, err := events.Decode(e)
	if err != nil {
		return err
	}
	u, ok := p.(*events.ResourceUpserted)
	if !ok {
		return fmt.Errorf("resource: unexpected event %s", e.Type)
	}
	*r = Resource{Exists: true, Name: u.Name, CountryCode: u.CountryCode, IsActive: u.IsActive, IsGuest: u.IsGuest}
	return nil
}
