// Package erasure owns erasure on request: of one user's notifications,
// and of a whole workspace's data (tenant offboarding). An erasure
// appends one event that names no personal data (the actor who asked,
// when, how much was erased), removes for good every event it replaces,
// with their parked copies and snapshots, and answers with a receipt. A
// stop part way is finished on restart (Finish), from the ledger of
// erasures begun.
package erasure

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"astro/commands"
	"astro/commands/notifications"
	"astro/events"
)

// ScopeErase is the privilege an erasure needs.
const ScopeErase = "data:erase"

// Log is the event log as an erasure needs it.
type Log interface {
	commands.Log
	notifications.LogEraser
	// Subjects lists the subjects matching filter that hold events.
	Subjects(ctx context.Context, filter string) ([]string, error)
	// First returns the sequence and event type of the oldest message on
	// subject (0 when none), decoding nothing.
	First(ctx context.Context, subject string) (seq uint64, eventType string, err error)
	// EraseBeforeKeeping is EraseBefore that leaves the events of the
	// types keep where they are.
	EraseBeforeKeeping(ctx context.Context, subject string, before uint64, overwrite bool, keep []string) (int, error)
	// EraseSubjects erases every event of each of subjects, those
	// appended while it runs too, until they hold none; it returns how
	// many it removed.
	EraseSubjects(ctx context.Context, subjects []string) (int, error)
}

// Snapshots erases aggregate snapshots.
type Snapshots interface {
	// Erase drops every snapshot, whatever its workspace.
	Erase(ctx context.Context) error
}

// Eraser erases users and workspaces.
type Eraser struct {
	log     Log
	snaps   Snapshots
	ledger  notifications.Ledger
	inboxes *notifications.Compactor
	now     func() time.Time
	logger  *slog.Logger

	finishing sync.Mutex
}

// New returns an Eraser.
func New(log Log, snaps Snapshots, ledger notifications.Ledger, inboxes *notifications.Compactor, now func() time.Time, logger *slog.Logger) (*Eraser, error) {
	if log == nil || snaps == nil || ledger == nil || inboxes == nil || now == nil {
		return nil, errors.New("erasure: New needs the log, snapshots, a ledger, the inbox compactor and a clock")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Eraser{log: log, snaps: snaps, ledger: ledger, inboxes: inboxes, now: now, logger: logger}, nil
}

// Receipt says what an erasure did.
type Receipt struct {
	ErasureID     string    `json:"erasureId"`
	Scope         string    `json:"scope"` // "user" or "workspace"
	WorkspaceID   string    `json:"workspaceId"`
	UserID        string    `json:"userId,omitempty"`
	RequestedBy   string    `json:"requestedBy"`
	ErasedAt      time.Time `json:"erasedAt"`
	Notifications int       `json:"notifications"` // pending when erased
	Inboxes       int       `json:"inboxes"`
	Holidays      int       `json:"holidays"`
	Resources     int       `json:"resources"`
	Events        int       `json:"events"` // removed from the log
}

func allowed(by commands.Caller) error {
	if !by.HasScope(ScopeErase) {
		return commands.Errorf(commands.EForbidden, "Erasing data needs the %s privilege.", ScopeErase)
	}
	return nil
}

// User erases every notification of user in the caller's workspace.
func (x *Eraser) User(ctx context.Context, by commands.Caller, user string) (Receipt, error) {
	if err := allowed(by); err != nil {
		return Receipt{}, err
	}
	res, err := x.inboxes.Erase(ctx, by, user)
	if err != nil {
		return Receipt{}, err
	}
	return Receipt{ErasureID: res.ErasureID, Scope: "user", WorkspaceID: by.WorkspaceID, UserID: user, RequestedBy: by.UserID,
		ErasedAt: x.now().UTC().Truncate(time.Microsecond), Notifications: res.Notifications, Inboxes: 1, Events: res.Events}, nil
}

// Workspace erases every notification, holiday and resource of the
// caller's workspace. What is left of it in the log is its
// WorkspaceErased event, with those of its earlier erasures, and an
// InboxErased on each inbox it had.
func (x *Eraser) Workspace(ctx context.Context, by commands.Caller) (Receipt, error) {
	if err := allowed(by); err != nil {
		return Receipt{}, err
	}
	ws := by.WorkspaceID
	agg := events.Aggregate{Kind: events.KindWorkspace, ID: ws}
	subject := events.Subject(ws, agg)
	if err := x.ledger.Begin(ctx, subject); err != nil {
		return Receipt{}, err
	}
	// The cut is the erasure's own event. A retry of a request whose first
	// attempt appended it (and then failed, at its deadline) finds it in
	// the log, with whatever the workspace has written since, which the
	// erasure must not take; its receipt is the one that event records.
	if by.Again && by.IdempotencyKey != "" {
		if out, seq, ok, err := x.earlier(ctx, by, agg); err != nil || ok {
			return x.finished(ctx, by, seq, true, out, err)
		}
	}
	now := x.now().UTC().Truncate(time.Microsecond)
	out := Receipt{Scope: "workspace", WorkspaceID: ws, RequestedBy: by.UserID, ErasedAt: now}
	var err error
	if out.Holidays, out.Resources, out.Inboxes, err = x.count(ctx, ws); err != nil {
		return Receipt{}, err
	}
	// Under an Idempotency-Key, the event's id comes from the key.
	out.ErasureID = commands.EventID(by, now, agg, events.WorkspaceErased{})
	e, err := events.New(out.ErasureID, by.Meta(now), agg, events.WorkspaceErased{
		ErasureID: out.ErasureID, Holidays: out.Holidays, Resources: out.Resources, Inboxes: out.Inboxes,
	})
	if err != nil {
		return Receipt{}, err
	}
	var seq uint64
	for attempt := 0; ; attempt++ {
		last, err := x.log.LastSeq(ctx, subject)
		if err != nil {
			return Receipt{}, err
		}
		seq, err = x.log.Append(ctx, subject, last, e)
		if errors.Is(err, events.ErrConflict) && attempt < 3 {
			continue // another erasure of the workspace at the same time
		}
		if errors.Is(err, events.ErrAlreadyAppended) {
			// This request's first attempt, moments ago.
			if out, seq, ok, err := x.earlier(ctx, by, agg); err != nil || ok {
				return x.finished(ctx, by, seq, true, out, err)
			}
		}
		if err != nil {
			return Receipt{}, fmt.Errorf("erase workspace %s: %w", ws, err)
		}
		break
	}
	return x.finished(ctx, by, seq, false, out, nil)
}

// finished finishes the erasure whose event is at seq, unless err; again
// when it may have begun to before (see finish).
func (x *Eraser) finished(ctx context.Context, by commands.Caller, seq uint64, again bool, out Receipt, err error) (Receipt, error) {
	if err != nil {
		return Receipt{}, err
	}
	err = x.finish(ctx, by, seq, again, &out)
	return out, err
}

// earlier finds the WorkspaceErased event an earlier attempt of by's
// request appended, and the receipt it records.
func (x *Eraser) earlier(ctx context.Context, by commands.Caller, agg events.Aggregate) (out Receipt, seq uint64, ok bool, err error) {
	mine := commands.EventID(by, time.Time{}, agg, events.WorkspaceErased{})
	subject := events.Subject(by.WorkspaceID, agg)
	if _, err := x.log.Read(ctx, subject, 0, func(e events.Event) error {
		if e.ID != mine {
			return nil
		}
		p, err := events.Decode(e)
		if err != nil {
			return err
		}
		if v, isErasure := p.(*events.WorkspaceErased); isErasure {
			out = Receipt{ErasureID: v.ErasureID, Scope: "workspace", WorkspaceID: by.WorkspaceID, RequestedBy: e.ActorID, ErasedAt: e.Time,
				Holidays: v.Holidays, Resources: v.Resources, Inboxes: v.Inboxes}
			seq, ok = e.Seq, true
		}
		return nil
	}); err != nil {
		return Receipt{}, 0, false, fmt.Errorf("read %s: %w", subject, err)
	}
	return out, seq, ok, nil
}

// count counts the aggregates of workspace ws that hold events.
func (x *Eraser) count(ctx context.Context, ws string) (holidays, resources, inboxes int, err error) {
	n := make([]int, 3)
	for i, kind := range []string{events.KindHoliday, events.KindResource, events.KindInbox} {
		subjects, err := x.log.Subjects(ctx, events.Subject(ws, events.Aggregate{Kind: kind, ID: "*"}))
		if err != nil {
			return 0, 0, 0, err
		}
		n[i] = len(subjects)
	}
	return n[0], n[1], n[2], nil
}

// finish removes the workspace's data the WorkspaceErased event at seq
// replaces: every inbox is erased, every holiday that existed before seq
// removed whole, and every resource and workspace event before seq
// removed but the earlier erasures' own, with their snapshots and parked
// copies.
//
// again is a run that may follow another of the same erasure (a retry, or
// the background finishing one cut short): it looks for the inboxes'
// erasures that run appended, where a first run spares itself the read of
// every inbox's history.
func (x *Eraser) finish(ctx context.Context, by commands.Caller, seq uint64, again bool, out *Receipt) error {
	ws := by.WorkspaceID
	// Holidays and resources first: a few subjects, quickly gone, where
	// the inboxes can take minutes. Until they are, a holiday's history
	// still shows it. A rename decided meanwhile, on state an instance
	// read before seq, lands after seq: a holiday created before the
	// erasure has no legitimate event after it, so its subject is emptied
	// whole, and a later rename on that state then conflicts, reloads and
	// finds no holiday. A resource is an upsert: one after seq creates it
	// anew, and stays. (One that changes nothing, decided on state read
	// before seq, appends nothing and is answered, and its resource then
	// goes with the rest: a PUT answered while the erasure ran; the next
	// PUT creates it again.)
	erased, err := x.holidaysBefore(ctx, ws, seq)
	if err != nil {
		return err
	}
	n, err := x.log.EraseSubjects(ctx, erased)
	out.Events += n
	if err != nil {
		return err
	}
	n, err = x.log.EraseBefore(ctx, events.Subject(ws, events.Aggregate{Kind: events.KindResource, ID: "*"}), seq, true)
	if err != nil {
		return err
	}
	out.Events += n
	// An earlier erasure's event names no personal data and is the audit
	// record of that erasure: it stays, as this one's will.
	n, err = x.log.EraseBeforeKeeping(ctx, events.Subject(ws, events.Aggregate{Kind: events.KindWorkspace, ID: "*"}), seq, true,
		[]string{events.WorkspaceErased{}.EventType()})
	if err != nil {
		return err
	}
	out.Events += n
	inboxes, err := x.log.Subjects(ctx, events.Subject(ws, events.Aggregate{Kind: events.KindInbox, ID: "*"}))
	if err != nil {
		return err
	}
	self := events.Subject(ws, events.Aggregate{Kind: events.KindWorkspace, ID: ws})
	// Each inbox's erasure is keyed to this erasure's event: run again (a
	// retry, or the background finishing one cut short), it finds the
	// InboxErased it appended before and cuts there, where appending
	// another would take what the inbox received since. (An inbox this
	// erasure had not reached when cut short is erased at its end.)
	inboxBy := by
	inboxBy.IdempotencyKey, inboxBy.Again = "workspace-erasure:"+out.ErasureID, again
	for _, s := range inboxes {
		_, a, err := events.ParseSubject(s)
		if err != nil {
			return err
		}
		res, err := x.inboxes.EraseInWorkspace(ctx, inboxBy, a.ID)
		if err != nil {
			return err
		}
		out.Notifications += res.Notifications
		out.Events += res.Events
		// Still under way: no other instance takes it for abandoned.
		if err := x.ledger.Begin(ctx, self); err != nil {
			return err
		}
	}
	if err := x.snaps.Erase(ctx); err != nil {
		return err
	}
	if _, err := x.log.EraseParked(ctx, events.SubjectPrefix+"."+ws+".>"); err != nil {
		return err
	}
	return x.ledger.Done(ctx, self)
}

// holidaysBefore lists the subjects of workspace ws's holidays that the
// erasure at seq removes whole: every one created before seq, and every
// one whose history no longer begins with its creation, which is what an
// erasure cut short while it emptied a subject left (EraseSubjects
// erases the creation first).
func (x *Eraser) holidaysBefore(ctx context.Context, ws string, seq uint64) ([]string, error) {
	subjects, err := x.log.Subjects(ctx, events.Subject(ws, events.Aggregate{Kind: events.KindHoliday, ID: "*"}))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range subjects {
		// Headers only: a message that is no event (a malformed one) is
		// taken, not a reason to stop.
		first, typ, err := x.log.First(ctx, s)
		if err != nil {
			return nil, err
		}
		if first == 0 {
			continue // emptied meanwhile
		}
		if first < seq || typ != (events.HolidayCreated{}).EventType() {
			out = append(out, s)
		}
	}
	return out, nil
}

// Finish finishes the erasures of workspaces begun before begunBefore
// (any, when it is zero) and cut short, by a stop or by their request's
// deadline, as the actor who asked for each; erasures of inboxes are the
// compactor's.
func (x *Eraser) Finish(ctx context.Context, begunBefore time.Time) error {
	// One at a time here: the start's pass and Run's rounds would
	// otherwise finish the same erasure side by side.
	x.finishing.Lock()
	defer x.finishing.Unlock()
	subjects, err := x.ledger.Unfinished(ctx)
	if err != nil {
		return err
	}
	// One that fails does not hold back the others behind it.
	var errs []error
	for _, s := range subjects {
		if err := x.finishOne(ctx, s, begunBefore); err != nil {
			errs = append(errs, fmt.Errorf("finish erasure %s: %w", s, err))
		}
	}
	return errors.Join(errs...)
}

// finishOne finishes the erasure on subject s if it is a workspace's and
// this caller claims it.
func (x *Eraser) finishOne(ctx context.Context, s string, begunBefore time.Time) error {
	ws, a, err := events.ParseSubject(s)
	if err != nil || a.Kind != events.KindWorkspace {
		return nil
	}
	if ok, err := x.ledger.Claim(ctx, s, begunBefore); err != nil || !ok {
		return err
	}
	var last *events.Event
	if _, err := x.log.Read(ctx, s, 0, func(e events.Event) error { last = &e; return nil }); err != nil {
		return err
	}
	if last == nil || last.Type != (events.WorkspaceErased{}).EventType() {
		// Stopped before its event: nothing was erased.
		return x.ledger.Done(ctx, s)
	}
	by := commands.Caller{WorkspaceID: ws, UserID: last.ActorID, Integration: last.Integration}
	out := Receipt{ErasureID: last.ID}
	if err := x.finish(ctx, by, last.Seq, true, &out); err != nil {
		return err
	}
	x.logger.Info("finished a workspace erasure cut short", "workspace", ws, "erasure", last.ID, "events", out.Events)
	return nil
}

// Run finishes, every poll until ctx ends, the workspace erasures begun
// more than abandoned ago and not done: a request's deadline cut them
// short while the service ran on, and nothing else would finish them
// before the next start. An erasure takes minutes for a large workspace
// (every message with content is overwritten), far past a request's.
func (x *Eraser) Run(ctx context.Context, poll, abandoned time.Duration) error {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := x.Finish(ctx, x.now().Add(-abandoned)); err != nil && ctx.Err() == nil {
			x.logger.Warn("finishing workspace erasures; trying again next round", "err", err)
		}
	}
}
