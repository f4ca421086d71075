package projections

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/nats-io/nats.go"

	"astro/events"
	"astro/events/natslog"
)

// ErrUnappliable is what a projector returns (wrapped) for an event it
// cannot apply however often it tries: the event, not the database, is at
// fault.
var ErrUnappliable = errors.New("event cannot be applied")

// Parking keeps the events a projector cannot apply, so that one bad event
// does not stop the read model, and gives them back for a redrive.
type Parking interface {
	Park(ctx context.Context, projector, subject string, h nats.Header, data []byte, seq uint64, reason string) error
	ListParked(ctx context.Context, projector string, fn func(natslog.Parked) error) error
	Unpark(ctx context.Context, parkSeq uint64) error
	// ScanSubjects calls fn for each event on subjects matching filters
	// (all of one stream) from the given position: what a parked event
	// reaches goes on without it.
	ScanSubjects(ctx context.Context, filters []string, from events.ScanFrom, fn func(events.Event) error) error
}

// RedrivenSubject is where a runner says that a redrive changed its read
// model: answers remembered from it (query's caches) are not exact any more,
// though the log has not moved.
func RedrivenSubject(projector string) string { return "astro.admin.redriven." + projector }

// poisonous tells an event's own fault from a passing one (a database that
// is down, a lost connection), which is retried instead.
func poisonous(err error) bool {
	var (
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
		pqErr  *pq.Error
	)
	switch {
	case errors.Is(err, ErrUnappliable), errors.Is(err, events.ErrMalformed),
		errors.Is(err, events.ErrUnknownType), errors.Is(err, events.ErrUnknownVersion),
		errors.As(err, &syntax), errors.As(err, &typ):
		return true
	case errors.As(err, &pqErr):
		// 22: data exception (bad date, value too long, invalid text);
		// 23: integrity constraint violation.
		return pqErr.Code.Class() == "22" || pqErr.Code.Class() == "23"
	}
	return false
}

// applyIsolated applies evs one by one inside tx, each under a savepoint,
// and returns the events that are poison with their errors. A passing
// error stops it: the whole batch is retried later.
func (r *Runner) applyIsolated(ctx context.Context, tx *sqlx.Tx, evs []events.Event) (map[uint64]error, error) {
	return applyIsolated(ctx, tx, r.p, evs)
}

func applyIsolated(ctx context.Context, tx *sqlx.Tx, p Projector, evs []events.Event) (map[uint64]error, error) {
	poison := map[uint64]error{}
	for _, e := range evs {
		if _, err := tx.ExecContext(ctx, `SAVEPOINT one_event`); err != nil {
			return nil, err
		}
		err := p.Apply(ctx, tx, []events.Event{e})
		if err == nil {
			if _, err := tx.ExecContext(ctx, `RELEASE SAVEPOINT one_event`); err != nil {
				return nil, err
			}
			continue
		}
		if !poisonous(err) {
			return nil, err
		}
		if _, rerr := tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT one_event`); rerr != nil {
			return nil, rerr
		}
		poison[e.Seq] = err
	}
	return poison, nil
}

// redrive applies this projector's parked events again, oldest first, and
// unparks those that now apply. It reports how many events were applied
// and unparked, how many parked copies are left, and whether it changed
// the read model (a replay committed, its unpark maybe not).
func (r *Runner) redrive(ctx context.Context) (applied, left int, changed bool, err error) {
	// Parking one event twice keeps one copy only within the log's
	// duplicate window; a batch retried past it (the database down for
	// longer) parks another. The event is applied once, and all its copies
	// go with it.
	copies := map[uint64][]natslog.Parked{}
	var seqs []uint64
	if err := r.cfg.Parking.ListParked(ctx, r.p.Name(), func(p natslog.Parked) error {
		if copies[p.Seq] == nil {
			seqs = append(seqs, p.Seq)
		}
		copies[p.Seq] = append(copies[p.Seq], p)
		return nil
	}); err != nil {
		return 0, 0, false, err
	}
	slices.Sort(seqs)
	tried := map[uint64]bool{} // event sequences tried, true once applied
	remaining := func() (n int) {
		for _, seq := range seqs {
			if !tried[seq] {
				n += len(copies[seq])
			}
		}
		return n
	}
	// An event counts as applied once its copies are unparked: one whose
	// unpark failed is still parked, and applied again by the next redrive,
	// as its replay leaves what the log in order gives.
	unpark := func(seq uint64) error {
		for _, p := range copies[seq] {
			if err := r.cfg.Parking.Unpark(ctx, p.ParkSeq); err != nil {
				return err
			}
		}
		tried[seq] = true
		applied++
		return nil
	}
	for _, seq := range seqs {
		if _, ok := tried[seq]; ok {
			continue // replayed after an earlier one
		}
		p := copies[seq][0]
		tried[seq] = false
		e, err := p.Event()
		var later map[uint64]bool
		if err == nil {
			later, err = r.applyParked(ctx, p.Subject, e, copies)
		}
		if err != nil {
			if !poisonous(err) {
				return applied, remaining(), changed, err
			}
			r.cfg.Logger.Warn("parked event still cannot be applied", "seq", p.Seq, "err", err)
			continue
		}
		changed = true
		if err := unpark(seq); err != nil {
			return applied, remaining(), changed, err
		}
		for seq, ok := range later {
			if _, done := tried[seq]; done {
				continue
			}
			tried[seq] = false // still parked unless it applied
			if ok {
				if err := unpark(seq); err != nil {
					return applied, remaining(), changed, err
				}
			}
		}
	}
	return applied, remaining(), changed, nil
}

// applyParked applies e, a parked event on subject, then again the later
// events it reaches (reach), up to where the runner is, in one
// transaction. They were applied without it, and e alone would land after
// them: a notification deleted since would be back, a holiday renamed
// since would have its first name, one created after its workspace's
// erasure would be erased, one erased since would be back. Applied in
// order after e, they leave the rows the log in order gives, since each
// statement of a projector sets what its event says (a send inserts if
// absent, a read sets the read date, a rename is guarded by its position).
// An inbox's tally of events since its compaction counts them again, so it
// comes due for compaction early. A later event that cannot be applied
// either is skipped (it is parked too). It returns which later events are
// parked ones (in parked), and whether each applied. An event the log
// cannot decode keeps e parked until it can be.
//
// The transaction holds the checkpoint where the runner left it, as a
// batch does (see writeCheckpoint), so a runner that lost its lock to
// another cannot bring back what the other applied since. e is applied
// before the log is read: one that still fails costs no read of a
// workspace's history, which is then read and applied a chunk at a time.
func (r *Runner) applyParked(ctx context.Context, subject string, e events.Event, parked map[uint64][]natslog.Parked) (map[uint64]bool, error) {
	upTo := r.Position()
	tx, err := r.db.BeginTxx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	if c, err := lockCheckpoint(ctx, tx, "projector_checkpoints", r.p.Name()); err != nil {
		return nil, err
	} else if c.Seq != upTo {
		return nil, fmt.Errorf("%w (at %d, where this runner left it at %d)", errCheckpointMoved, c.Seq, upTo)
	}
	if err := r.p.Apply(ctx, tx, []events.Event{e}); err != nil {
		return nil, fmt.Errorf("apply parked seq %d: %w", e.Seq, err)
	}
	out := map[uint64]bool{}
	var chunk []events.Event
	flush := func() error {
		poison, err := applyChunk(ctx, tx, r.p, chunk)
		if err != nil {
			return err
		}
		for _, l := range chunk {
			if parked[l.Seq] != nil {
				out[l.Seq] = poison[l.Seq] == nil
			}
		}
		for seq, err := range poison {
			r.cfg.Logger.Warn("redrive: a later event cannot be applied", "parked_seq", e.Seq, "seq", seq, "err", err)
		}
		chunk = chunk[:0]
		return nil
	}
	var applyErr error
	err = r.cfg.Parking.ScanSubjects(ctx, reach(subject, e), events.ScanFrom{Seq: e.Seq + 1}, func(l events.Event) error {
		if l.Seq > upTo {
			return errEnough
		}
		if chunk = append(chunk, l); len(chunk) == max(r.cfg.Batch, 1) {
			applyErr = flush()
		}
		return applyErr
	})
	switch {
	case applyErr != nil:
		return nil, applyErr
	case err != nil && !errors.Is(err, errEnough):
		return nil, fmt.Errorf("read what came after parked seq %d: %w", e.Seq, err)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	return out, nil
}

// applyChunk applies evs in tx as a batch does, or, when one of them is at
// fault, one by one (applyIsolated), and returns those at fault.
func applyChunk(ctx context.Context, tx *sqlx.Tx, p Projector, evs []events.Event) (map[uint64]error, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	if _, err := tx.ExecContext(ctx, `SAVEPOINT chunk`); err != nil {
		return nil, err
	}
	err := p.Apply(ctx, tx, evs)
	if err == nil {
		_, err = tx.ExecContext(ctx, `RELEASE SAVEPOINT chunk`)
		return nil, err
	}
	if !poisonous(err) {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT chunk`); err != nil {
		return nil, err
	}
	return applyIsolated(ctx, tx, p, evs)
}

// reach is what a replay after the event e on subject must cover: an
// inbox's own events (its erasure is one of them), or for the rest of
// the workspace's history, all of it: a workspace's erasure changes every
// holiday and resource, and erases any of them again.
func reach(subject string, e events.Event) []string {
	if e.Aggregate.Kind == events.KindInbox {
		return []string{subject}
	}
	ws := e.WorkspaceID
	return []string{
		events.Subject(ws, events.Aggregate{Kind: events.KindHoliday, ID: "*"}),
		events.Subject(ws, events.Aggregate{Kind: events.KindResource, ID: "*"}),
		events.Subject(ws, events.Aggregate{Kind: events.KindWorkspace, ID: "*"}),
	}
}

var errEnough = errors.New("enough")
