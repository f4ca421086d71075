package commands

import (
	"context"
	"slices"
	"strconv"
	"time"

	"astro/events"
)

// Caller is who a command acts for, as established by authentication.
type Caller struct {
	UserID        string
	WorkspaceID   string
	Scopes        []string
	Integration   string // x-integration-name, recorded on every event
	CorrelationID string
	// IdempotencyKey, when set, makes the ids of the events a command
	// appends a function of the key, so a retried request is dropped by the
	// log's duplicate window instead of appended twice.
	IdempotencyKey string
	// Again: the request ran before under IdempotencyKey and may have
	// appended (it failed, or its process died). The command then looks
	// for its events among the aggregate's before it appends them.
	Again bool
}

// HasScope reports whether the caller holds privilege s.
func (c Caller) HasScope(s string) bool { return slices.Contains(c.Scopes, s) }

// Meta is the event metadata of a command by c at now.
func (c Caller) Meta(now time.Time) events.Meta {
	return events.Meta{
		WorkspaceID:   c.WorkspaceID,
		ActorID:       c.UserID,
		Integration:   c.Integration,
		CorrelationID: c.CorrelationID,
		Time:          now,
	}
}

// NewEvents wraps the payloads a command decided into events on aggregate
// a. Event ids are random, or derived from the caller's idempotency key so a
// retried request yields the very same ids: from the aggregate, the type and
// its occurrence, not the position, since a retry decided on the state an
// earlier attempt left may decide fewer events. An event that acts on one
// thing (events.Targeted) is named by that thing instead: a retry that
// decides to delete another notification than its first attempt did must
// append that delete, not have it dropped as the first one's duplicate.
func NewEvents(c Caller, now time.Time, a events.Aggregate, ps ...events.Payload) ([]events.Event, error) {
	out := make([]events.Event, len(ps))
	seen := map[string]int{}
	for i, p := range ps {
		n := seen[p.EventType()]
		seen[p.EventType()]++
		e, err := events.New(eventID(c, now, a, p, n), c.Meta(now), a, p)
		if err != nil {
			return nil, err
		}
		out[i] = e
	}
	return out, nil
}

// EventID is the id NewEvents gives the first event of payload p's type.
func EventID(c Caller, now time.Time, a events.Aggregate, p events.Payload) string {
	return eventID(c, now, a, p, 0)
}

// eventID is the id of the nth event of p's type that c's command decides
// on a: under an Idempotency-Key, the same for every attempt of the request
// (a targeted event is told apart by its target), so the log recognises a
// retried append.
func eventID(c Caller, now time.Time, a events.Aggregate, p events.Payload, n int) string {
	if c.IdempotencyKey == "" {
		return events.NewID(now)
	}
	occurrence := strconv.Itoa(n)
	if t, ok := p.(events.Targeted); ok {
		occurrence = "target:" + t.Target()
	}
	return events.NameID(c.WorkspaceID, c.UserID, c.IdempotencyKey, a.Kind, a.ID, p.EventType(), occurrence)
}

// Run decides a command against aggregate a of the caller's workspace and
// appends what it decides, as events by the caller at now. decide sees the
// aggregate's current state and returns the payloads (none for a no-op);
// it may run again on newer state after a lost race, so it must not change
// the aggregate.
func Run[A Aggregate](ctx context.Context, s *Store[A], c Caller, a events.Aggregate, now time.Time, decide func(A) ([]events.Payload, error)) (Result, error) {
	return RunAt(ctx, s, c, a, 0, now, decide)
}

// RunAt is Run for a caller that has seen the aggregate's stream up to
// position at, as Store.ExecuteAt says; 0 is Run. A retried request
// (Caller.Again) runs as Run does.
func RunAt[A Aggregate](ctx context.Context, s *Store[A], c Caller, a events.Aggregate, at uint64, now time.Time, decide func(A) ([]events.Payload, error)) (Result, error) {
	execute := func(ctx context.Context, subject string, decide Decide[A]) (Result, error) {
		return s.ExecuteAt(ctx, subject, at, decide)
	}
	if c.Again && c.IdempotencyKey != "" {
		execute = s.ExecuteAgain
	}
	return runWith(ctx, c, a, now, decide, execute)
}

// RunAfter is Run for a decision of one event that rests on what the
// subjects guard matches held up to their last event at guardSeq, read
// before it: the append expects them there (Store.ExecuteAfter), and
// answers events.ErrLogMoved when they moved on. A retry under an
// Idempotency-Key (Caller.Again) keeps the condition: it decides again.
func RunAfter[A Aggregate](ctx context.Context, s *Store[A], c Caller, a events.Aggregate, guard string, guardSeq uint64, now time.Time, decide func(A) ([]events.Payload, error)) (Result, error) {
	again := c.Again && c.IdempotencyKey != ""
	return runWith(ctx, c, a, now, decide, func(ctx context.Context, subject string, decide Decide[A]) (Result, error) {
		return s.ExecuteAfter(ctx, subject, guard, guardSeq, again, decide)
	})
}

// runWith runs decide as c's command on a through execute.
func runWith[A Aggregate](ctx context.Context, c Caller, a events.Aggregate, now time.Time, decide func(A) ([]events.Payload, error),
	execute func(context.Context, string, Decide[A]) (Result, error)) (Result, error) {
	return execute(ctx, events.Subject(c.WorkspaceID, a), func(agg A) ([]events.Event, error) {
		ps, err := decide(agg)
		if err != nil || len(ps) == 0 {
			return nil, err
		}
		return NewEvents(c, now, a, ps...)
	})
}

// Earlier finds the event of payload p that an earlier attempt of c's
// request, retried under its Idempotency-Key (Caller.Again), appended to
// aggregate a: a retry refused on the state its own first attempt made (a
// delete of the notification it deleted) answers as that attempt would
// have. ok is false for any other request.
func Earlier[A Aggregate](ctx context.Context, s *Store[A], c Caller, a events.Aggregate, p events.Payload) (e events.Event, ok bool, err error) {
	if !c.Again || c.IdempotencyKey == "" {
		return events.Event{}, false, nil
	}
	subject := events.Subject(c.WorkspaceID, a)
	ids, err := s.ids(ctx, subject)
	if err != nil {
		return events.Event{}, false, err
	}
	if e, ok = ids[EventID(c, time.Time{}, a, p)]; !ok {
		return events.Event{}, false, nil
	}
	// The attempt that appended it may have failed its fsync.
	if err := s.log.Durable(ctx, subject, e.Seq); err != nil {
		return events.Event{}, false, unavailable(err)
	}
	return e, true, nil
}
