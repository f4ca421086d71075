package events

import (
	"encoding/json"
	"fmt"
	"time"
)

// Event is one fact in the log. Seq is the log's sequence number and is
// set only on events read back from the log.
type Event struct {
	ID            string
	Type          string
	Version       int
	WorkspaceID   string
	Aggregate     Aggregate
	Time          time.Time
	ActorID       string
	Integration   string
	CorrelationID string
	Data          json.RawMessage
	Seq           uint64
}

// Meta is what a command knows about its cause; every event the command
// produces carries it.
type Meta struct {
	WorkspaceID   string
	ActorID       string
	Integration   string
	CorrelationID string
	Time          time.Time
}

// Payload is the typed body of an event.
type Payload interface {
	EventType() string
	EventVersion() int
}

// Targeted is a payload that acts on one thing of its aggregate (one
// notification of an inbox). An event id derived from an idempotency key
// names its target, so a retry that decides to act on another thing (an
// overflow delete of a newer oldest) appends its own event instead of
// having it taken for the first attempt's.
type Targeted interface {
	Target() string
}

// New builds an event of payload p on aggregate a. id must be unique per
// event and stable across retries of the same append, since the log uses it
// to drop duplicates.
func New(id string, m Meta, a Aggregate, p Payload) (Event, error) {
	data, err := json.Marshal(p)
	if err != nil {
		return Event{}, fmt.Errorf("encode %s: %w", p.EventType(), err)
	}
	return Event{
		ID:            id,
		Type:          p.EventType(),
		Version:       p.EventVersion(),
		WorkspaceID:   m.WorkspaceID,
		Aggregate:     a,
		Time:          m.Time.UTC().Truncate(time.Microsecond), // as PostgreSQL keeps it, and the API writes it
		ActorID:       m.ActorID,
		Integration:   m.Integration,
		CorrelationID: m.CorrelationID,
		Data:          data,
	}, nil
}

// Decode returns the typed payload of e, upcast to the current version.
func Decode(e Event) (Payload, error) {
	newPayload, ok := registry[e.Type]
	if !ok {
		return nil, fmt.Errorf("event %s (seq %d): %w %q", e.ID, e.Seq, ErrUnknownType, e.Type)
	}
	p := newPayload()
	if e.Version > p.EventVersion() || e.Version < 1 {
		return nil, fmt.Errorf("event %s (seq %d): %w: %s v%d", e.ID, e.Seq, ErrUnknownVersion, e.Type, e.Version)
	}
	data, err := upcast(e.Type, e.Version, e.Data)
	if err != nil {
		return nil, fmt.Errorf("event %s (seq %d): upcast %s v%d: %w: %w", e.ID, e.Seq, e.Type, e.Version, ErrMalformed, err)
	}
	if err := json.Unmarshal(data, p); err != nil {
		return nil, fmt.Errorf("event %s (seq %d): decode %s: %w: %w", e.ID, e.Seq, e.Type, ErrMalformed, err)
	}
	return p, nil
}

// ScanFrom places a read of the log: where a scan, a follow or a live
// stream begins.
type ScanFrom struct {
	Seq  uint64    // first stream sequence to read; 0 with zero Time: from the start
	Time time.Time // first event stored at or after this time, when Seq is 0
}
