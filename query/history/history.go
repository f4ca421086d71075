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
	"time"

	"astro/commands"
	"astro/events"
	"astro/events/natslog"
	"astro/query"
)

// Log is the event log as history reads it.
type Log interface {
	Read(ctx context.Context, subject string, after uint64, fn func(events.Event) error) (uint64, error)
	Scan(ctx context.Context, filter string, from natslog.ScanFrom, fn func(events.Event) error) error
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

// History returns every event of a holiday in log order.
func (h *Holidays) History(ctx context.Context, workspaceID, id string) ([]HolidayEvent, error) {
	if !events.ValidUUID(id) {
		return nil, commands.Invalid(map[string][]string{"id": {"The id must be a UUID."}})
	}
	var out []HolidayEvent
	subject := events.Subject(workspaceID, events.Aggregate{Kind: events.KindHoliday, ID: id})
	_, err := h.log.Read(ctx, subject, 0, func(e events.Event) error {
		p, err := events.Decode(e)
		if err != nil {
			return err
		}
		entry := HolidayEvent{Sequence: e.Seq, Type: e.Type, Version: e.Version, Time: e.Time, ActorID: e.ActorID,
			IntegrationName: e.Integration, CorrelationID: e.CorrelationID, Data: p}
		switch p := p.(type) {
		case *events.HolidayCreated:
			entry.NewReason = p.Reason
		case *events.HolidayRenamed:
			old := p.OldReason
			entry.OldReason, entry.NewReason = &old, p.NewReason
		}
		out = append(out, entry)
		return nil
	})
	if err != nil {
		return nil, &commands.Error{Code: commands.EUnavailable, Message: "The history could not be read; try again.", Err: err}
	}
	if len(out) == 0 {
		return nil, notFound()
	}
	return out, nil
}

// AsOf returns the holiday as it was at moment at, with the resources that
// were in its scope then, all computed from the log.
func (h *Holidays) AsOf(ctx context.Context, workspaceID, id string, at time.Time) (query.HolidayDetailDto, error) {
	hist, err := h.History(ctx, workspaceID, id)
	if err != nil {
		return query.HolidayDetailDto{}, err
	}
	var created *events.HolidayCreated
	reason := ""
	for _, e := range hist {
		if e.Time.After(at) {
			break
		}
		if c, ok := e.Data.(*events.HolidayCreated); ok {
			created = c
		}
		reason = e.NewReason
	}
	if created == nil {
		return query.HolidayDetailDto{}, commands.Errorf(commands.ENotFound, "The holiday did not exist at that time.")
	}
	dto := query.HolidayDetailDto{
		ID: id, Reason: reason, Type: created.Type, DateFrom: &created.DateFrom, DateTo: &created.DateTo,
		CountryID: append([]string{}, created.CountryIDs...), Resources: []query.HolidayResourceDto{},
	}
	if created.Type == events.HolidayPeople {
		for _, r := range created.ResourceIDs {
			dto.Resources = append(dto.Resources, query.HolidayResourceDto{ID: r})
		}
		return dto, nil
	}
	inScope, err := h.resourcesAt(ctx, workspaceID, at, created)
	if err != nil {
		return query.HolidayDetailDto{}, err
	}
	for _, r := range inScope {
		dto.Resources = append(dto.Resources, query.HolidayResourceDto{ID: r})
	}
	return dto, nil
}

// resourcesAt folds the workspace's resource events up to at and keeps the
// active, non-guest resources in the holiday's scope, sorted by id.
func (h *Holidays) resourcesAt(ctx context.Context, workspaceID string, at time.Time, c *events.HolidayCreated) ([]string, error) {
	latest := map[string]*events.ResourceUpserted{}
	filter := events.SubjectPrefix + "." + workspaceID + "." + events.KindResource + ".*"
	err := h.log.Scan(ctx, filter, natslog.ScanFrom{}, func(e events.Event) error {
		if e.Time.After(at) {
			return nil
		}
		p, err := events.Decode(e)
		if err != nil {
			return err
		}
		if r, ok := p.(*events.ResourceUpserted); ok {
			latest[r.ResourceID] = r
		}
		return nil
	})
	if err != nil {
		return nil, &commands.Error{Code: commands.EUnavailable, Message: "The history could not be read; try again.", Err: err}
	}
	var ids []string
	for id, r := range latest {
		if r.IsActive && !r.IsGuest && (c.Type == events.HolidayGlobal || slices.Contains(c.CountryIDs, r.CountryCode)) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids, nil
}
