// Package history answers reads from the event log itself, not from a read
// model: the audit trail of a holiday and a holiday as it was at a past
// moment. Audits trust it because nothing but the log stands between the
// question and the answer.
package history

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"time"

	"astro/commands"
	"astro/events"
	"astro/query"
)

// Log is the event log as history reads it.
type Log interface {
	Read(ctx context.Context, subject string, after uint64, fn func(events.Event) error) (uint64, error)
	ScanSubjects(ctx context.Context, filters []string, from events.ScanFrom, fn func(events.Event) error) error
}

// HolidayEvent is one entry of a holiday's history.
type HolidayEvent struct {
	Sequence        uint64         `json:"sequence"`
	Type            string         `json:"type"`
	Version         int            `json:"version"`
	Time            time.Time      `json:"time"`
	ActorID         string         `json:"actorId"`
	IntegrationName string         `json:"integrationName"`
	CorrelationID   string         `json:"correlationId"`
	OldReason       *string        `json:"oldReason"` // null when the holiday was created
	NewReason       string         `json:"newReason"` // the reason after the event
	Data            events.Payload `json:"data"`      // the event's payload, at its current version
}

// Holidays reads holiday history.
type Holidays struct{ log Log }

// NewHolidays returns a history reader on log.
func NewHolidays(log Log) (*Holidays, error) {
	if log == nil {
		return nil, errors.New("history: NewHolidays needs a log")
	}
	return &Holidays{log: log}, nil
}

func notFound() error { return commands.Errorf(commands.ENotFound, "The holiday was not found.") }

// MaxPage is the most history entries one read returns: a holiday renamed
// without end must not make an answer without end.
const MaxPage = 1000

// errPageFull stops a read of the log once a page or a fold has what it needs.
var errPageFull = errors.New("history: page full")

// holidaySubject is the log subject of a holiday's events.
func holidaySubject(workspaceID, id string) (string, error) {
	if !events.ValidUUID(id) {
		return "", commands.Invalid(map[string][]string{"id": {"The id must be a UUID."}})
	}
	// Ids are lower case in subjects; a caller may name one in any case
	// (the CLI passes it on as typed).
	return events.Subject(workspaceID, events.Aggregate{Kind: events.KindHoliday, ID: strings.ToLower(id)}), nil
}

// entryOf is a holiday's event as its history shows it.
func entryOf(e events.Event) (HolidayEvent, error) {
	p, err := events.Decode(e)
	if err != nil {
		return HolidayEvent{}, err
	}
	// Older releases recorded holiday events to the nanosecond; the API
	// writes every date-time to the microsecond.
	out := HolidayEvent{Sequence: e.Seq, Type: e.Type, Version: e.Version, Time: e.Time.Truncate(time.Microsecond), ActorID: e.ActorID,
		IntegrationName: e.Integration, CorrelationID: e.CorrelationID, Data: p}
	switch p := p.(type) {
	case *events.HolidayCreated:
		out.NewReason = p.Reason
	case *events.HolidayRenamed:
		old := p.OldReason
		out.OldReason, out.NewReason = &old, p.NewReason
	}
	return out, nil
}

// each calls fn with the entries of a holiday's history after log sequence
// after, in log order, until fn returns errPageFull. found reports whether
// there was any.
func (h *Holidays) each(ctx context.Context, workspaceID, id string, after uint64, fn func(HolidayEvent) error) (found bool, err error) {
	subject, err := holidaySubject(workspaceID, id)
	if err != nil {
		return false, err
	}
	_, err = h.log.Read(ctx, subject, after, func(e events.Event) error {
		entry, err := entryOf(e)
		if err != nil {
			return err
		}
		found = true
		return fn(entry)
	})
	if err != nil && !errors.Is(err, errPageFull) {
		return false, commands.ReadFailed(err)
	}
	return found, nil
}

// History returns a page of a holiday's history in log order: at most
// limit entries (MaxPage when limit is 0) after log sequence after (0: from
// the start). The next page is after the last entry's Sequence; a page
// shorter than limit is the last. Each entry's data has its ids as the
// event recorded them: an audit reads what was written, so an older
// Astro's "res-000" stays that here, where the holiday, its lists and AsOf
// show its UUID (events.HolidayCreated.Normal).
func (h *Holidays) History(ctx context.Context, workspaceID, id string, after uint64, limit int) ([]HolidayEvent, error) {
	if limit <= 0 || limit > MaxPage {
		limit = MaxPage
	}
	out := []HolidayEvent{}
	found, err := h.each(ctx, workspaceID, id, after, func(e HolidayEvent) error {
		out = append(out, e)
		if len(out) == limit {
			return errPageFull
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !found && after > 0 {
		// Past the end of a holiday's history, or no holiday at all.
		found, err = h.each(ctx, workspaceID, id, 0, func(HolidayEvent) error { return errPageFull })
		if err != nil {
			return nil, err
		}
	}
	if !found {
		return nil, notFound()
	}
	return out, nil
}

// AsOf returns the holiday as it was at moment at, with the resources that
// were in its scope then, all computed from the log. The answer is a state
// the log held, one of its prefixes. at is compared with each event's
// recorded time (when its request began, on the clock of the instance that
// served it), which need not follow the log's order: the request that
// started later may append first. So the events the answer is built from
// (the holiday's own and, for a global or country holiday, the
// workspace's resources') are read in log order and cut together at the
// first of them recorded later than at; an event after it is left out
// even if it was recorded earlier.
func (h *Holidays) AsOf(ctx context.Context, workspaceID, id string, at time.Time) (query.HolidayDetailDto, error) {
	// The first event says whether resources count: a people holiday's
	// answer is its own events alone, read as its history is, without a
	// scan of every resource of the workspace.
	var first HolidayEvent
	found, err := h.each(ctx, workspaceID, id, 0, func(e HolidayEvent) error {
		first = e
		return errPageFull
	})
	if err != nil {
		return query.HolidayDetailDto{}, err
	}
	if !found {
		return query.HolidayDetailDto{}, notFound()
	}
	var created *events.HolidayCreated
	reason := ""
	holiday := func(e HolidayEvent) error {
		if e.Time.After(at) {
			return errPageFull
		}
		if c, ok := e.Data.(*events.HolidayCreated); ok {
			created = c
		}
		reason = e.NewReason
		return nil
	}
	var latest map[string]*events.ResourceUpserted
	if c, ok := first.Data.(*events.HolidayCreated); ok && c.Type == events.HolidayPeople {
		if holiday(first) == nil {
			if _, err := h.each(ctx, workspaceID, id, first.Sequence, holiday); err != nil {
				return query.HolidayDetailDto{}, err
			}
		}
	} else if latest, err = h.fold(ctx, workspaceID, id, at, holiday); err != nil {
		return query.HolidayDetailDto{}, err
	}
	if created == nil {
		return query.HolidayDetailDto{}, commands.Errorf(commands.ENotFound, "The holiday did not exist at that time.")
	}
	// The holiday as the read model would have held it then: resource ids
	// in today's forms, whatever an older Astro wrote.
	normal := created.Normal()
	created = &normal
	// Shaped as a GET shapes it: no date is null, and countries are a
	// country holiday's only (an older Astro's global holiday may name one).
	dto := query.HolidayDetailDto{ID: id, Reason: reason, Type: created.Type, CountryID: []string{}, Resources: []query.HolidayResourceDto{}}
	if created.DateFrom != "" {
		dto.DateFrom = &created.DateFrom
	}
	if created.DateTo != "" {
		dto.DateTo = &created.DateTo
	}
	if created.Type == events.HolidayCountry {
		dto.CountryID = append(dto.CountryID, created.CountryIDs...)
	}
	if created.Type == events.HolidayPeople {
		for _, r := range created.ResourceIDs {
			dto.Resources = append(dto.Resources, query.HolidayResourceDto{ID: r})
		}
		return dto, nil
	}
	for _, r := range inScope(latest, created) {
		dto.Resources = append(dto.Resources, query.HolidayResourceDto{ID: r})
	}
	return dto, nil
}

// fold reads the holiday's events and the workspace's resource events in
// one scan, so in their one log order, up to the first recorded later than
// at. It passes the holiday's to holiday and returns each resource's last
// upsert.
func (h *Holidays) fold(ctx context.Context, workspaceID, id string, at time.Time, holiday func(HolidayEvent) error) (map[string]*events.ResourceUpserted, error) {
	subject, err := holidaySubject(workspaceID, id)
	if err != nil {
		return nil, err
	}
	resources := events.SubjectPrefix + "." + workspaceID + "." + events.KindResource + ".*"
	latest := map[string]*events.ResourceUpserted{}
	err = h.log.ScanSubjects(ctx, []string{subject, resources}, events.ScanFrom{}, func(e events.Event) error {
		// At the time history shows (entryOf), which an older release's
		// nanoseconds would pass.
		if e.Time.Truncate(time.Microsecond).After(at) {
			return errPageFull
		}
		if e.Aggregate.Kind == events.KindHoliday {
			entry, err := entryOf(e)
			if err != nil {
				return err
			}
			return holiday(entry)
		}
		p, err := events.Decode(e)
		if err != nil {
			return err
		}
		if r, ok := p.(*events.ResourceUpserted); ok {
			// "res-000" of an older Astro and its UUID are one resource,
			// the later upsert its state; one that names no UUID is none.
			if n, ok := r.Normal(); ok {
				latest[n.ResourceID] = &n
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errPageFull) {
		return nil, commands.ReadFailed(err)
	}
	return latest, nil
}

// inScope is the active, non-guest resources of latest in the holiday's
// scope, sorted by id.
func inScope(latest map[string]*events.ResourceUpserted, c *events.HolidayCreated) []string {
	var ids []string
	for id, r := range latest {
		if r.IsActive && !r.IsGuest && (c.Type == events.HolidayGlobal || slices.Contains(c.CountryIDs, r.CountryCode)) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}
