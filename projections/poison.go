package projections

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

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
	// Read calls fn for each event of subject after position after: a
	// parked event's aggregate goes on without it.
	Read(ctx context.Context, subject string, after uint64, fn func(events.Event) error) (uint64, error)
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
// unparks those that now apply. It reports how many were applied and how
// many are still parked.
func (r *Runner) redrive(ctx context.Context) (applied, left int, err error) {
	var parked []natslog.Parked
	if err := r.cfg.Parking.ListParked(ctx, r.p.Name(), func(p natslog.Parked) error {
		parked = append(parked, p)
		return nil
	}); err != nil {
		return 0, 0, err
	}
	// Parking one event twice keeps one copy only within the log's
	// duplicate window; a batch retried past it (the database down for
	// longer) parks another. A second copy is never applied: it is unparked,
	// or left beside the first if that one is still parked.
	seen := map[uint64]bool{} // event sequences met, true once applied
	for _, p := range parked {
		if appliedBefore, ok := seen[p.Seq]; ok {
			if appliedBefore {
				if err := r.cfg.Parking.Unpark(ctx, p.ParkSeq); err != nil {
					return applied, len(parked) - applied, err
				}
			} else {
				left++
			}
			continue
		}
		seen[p.Seq] = false
		e, err := p.Event()
		if err == nil {
			err = r.applyParked(ctx, p.Subject, e)
		}
		if err != nil {
			if !poisonous(err) {
				return applied, len(parked) - applied, err
			}
			r.cfg.Logger.Warn("parked event still cannot be applied", "seq", p.Seq, "err", err)
			left++
			continue
		}
		if err := r.cfg.Parking.Unpark(ctx, p.ParkSeq); err != nil {
			return applied, len(parked) - applied, err
		}
		seen[p.Seq] = true
		applied++
	}
	return applied, left, nil
}

// applyParked applies e, a parked event on subject, then the later events
// of its aggregate again, up to where the runner is, in one transaction.
// They were applied without it, and e alone would land after them: a
// notification deleted since would be back, a holiday renamed since would
// have its first name again. Applied in order after e, they leave what the
// log in order gives, since each statement of a projector sets what its
// event says (a send inserts if absent, a read sets the read date, a
// rename is guarded by its position). A later event that cannot be applied
// either is skipped: it is parked too, and has its own turn. One the log
// cannot decode keeps e parked until it can be.
func (r *Runner) applyParked(ctx context.Context, subject string, e events.Event) error {
	upTo := r.Position()
	var later []events.Event
	if _, err := r.cfg.Parking.Read(ctx, subject, e.Seq, func(l events.Event) error {
		if l.Seq > upTo {
			return errEnough
		}
		later = append(later, l)
		return nil
	}); err != nil && !errors.Is(err, errEnough) {
		return fmt.Errorf("read %s after parked seq %d: %w", subject, e.Seq, err)
	}
	tx, err := r.db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := r.p.Apply(ctx, tx, []events.Event{e}); err != nil {
		return fmt.Errorf("apply parked seq %d: %w", e.Seq, err)
	}
	poison, err := applyIsolated(ctx, tx, r.p, later)
	if err != nil {
		return err
	}
	for seq, err := range poison {
		r.cfg.Logger.Warn("redrive: a later event of the aggregate cannot be applied", "parked_seq", e.Seq, "seq", seq, "err", err)
	}
	return tx.Commit()
}

var errEnough = errors.New("enough")
