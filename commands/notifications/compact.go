package notifications

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"astro/commands"
	"astro/events"
)

// Notifications are ephemeral, so an inbox's history is not kept: it is
// compacted. A compaction appends InboxCompacted parts restating the
// inbox's pending state, content included, then erases every event before
// them. Erasure on request appends InboxErased and erases everything
// before it. Either way the log that is left rebuilds the inbox exactly.
//
// Each is three steps (record, append, erase) and a crash may stop it
// between any two: the ledger keeps the subjects whose erasure began, and
// Finish, which a restarted compactor runs for each, works out from the
// log alone what is left to erase.

// Eraser removes events from the log for good.
type Eraser interface {
	// EraseBefore removes every event on subject with a sequence below
	// before (0: every event) and returns how many it removed. With
	// overwrite their bytes are overwritten at once; without, they leave
	// the files when the log's turnover drops their block.
	EraseBefore(ctx context.Context, subject string, before uint64, overwrite bool) (int, error)
	// Turnover is how long the log of subject takes to close the block
	// it is writing (0: unknown, or never).
	Turnover(ctx context.Context, subject string) (time.Duration, error)
	// EraseParked erases the parked copies of events on subjects matching
	// filter.
	EraseParked(ctx context.Context, filter string) (int, error)
	// EraseSnapshots removes every aggregate's snapshot for good: an
	// inbox's holds the ids and read dates of what an erasure removes.
	EraseSnapshots(ctx context.Context) error
}

// History reads an inbox's whole history at once.
type History interface {
	// ReadAll calls fn for every event the log holds on subject, in order.
	ReadAll(ctx context.Context, subject string, fn func(events.Event) error) error
}

// Log is the event log as compaction needs it.
type Log interface {
	commands.Log
	History
}

// Ledger remembers the erasures begun and not finished, by subject.
type Ledger interface {
	Begin(ctx context.Context, subject string) error
	Done(ctx context.Context, subject string) error
	// Unfinished lists the erasures begun and not done.
	Unfinished(ctx context.Context) ([]string, error)
	// Claim takes an unfinished erasure begun before begunBefore (any,
	// when it is zero) for the caller to finish: false when it is younger,
	// done, or another instance took it first.
	Claim(ctx context.Context, subject string, begunBefore time.Time) (bool, error)
}

// CompactorConfig tunes compaction.
type CompactorConfig struct {
	// PartBytes bounds the content one InboxCompacted event carries, well
	// inside a NATS message (1 MiB by default). Default 256 KiB.
	PartBytes int
	// EraseWithin bounds how long a deleted notification's content stays
	// in the log's files. Every inbox with events since its compaction is
	// compacted once its oldest event is half this old; a compaction
	// overwrites what it removes unless the log closes its blocks within
	// a quarter of it (Eraser.Turnover), in which case dropping the blocks
	// erases it in time, and then an inbox idle since its compaction is
	// compacted again at that age too: its live parts would keep their
	// block, and whatever others removed in it, for good. Default 24h.
	EraseWithin time.Duration
	Logger      *slog.Logger
}

// Compactor compacts inboxes and erases them on request.
type Compactor struct {
	inboxes *Inboxes
	log     Log
	erase   Eraser
	ledger  Ledger
	now     func() time.Time
	cfg     CompactorConfig

	// One operation at a time on an inbox: a compaction that purges,
	// beside an erasure of the same inbox, could take what the erasure
	// has yet to overwrite, and leave its bytes in the files. A lock of
	// its own for each: an inbox sharing one with another user's would
	// make that user's erasure wait out a compaction it has no part in,
	// up to its deadline.
	mu    sync.Mutex
	locks map[string]*inboxLock
}

// inboxLock is the lock of one inbox: a token, taken with a deadline, and
// how many hold or wait for it, so that the last to leave removes it.
type inboxLock struct {
	token chan struct{}
	users int
}

// NewCompactor returns a Compactor working on the inboxes of store, which
// keeps them in log.
func NewCompactor(store *Inboxes, log Log, erase Eraser, ledger Ledger, now func() time.Time, cfg CompactorConfig) (*Compactor, error) {
	if store == nil || log == nil || erase == nil || ledger == nil || now == nil {
		return nil, errors.New("notifications: NewCompactor needs an inbox store, the log, an eraser, a ledger and a clock")
	}
	if cfg.PartBytes <= 0 {
		cfg.PartBytes = 256 << 10
	}
	if cfg.EraseWithin <= 0 {
		cfg.EraseWithin = 24 * time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Compactor{inboxes: store, log: log, erase: erase, ledger: ledger, now: now, cfg: cfg, locks: map[string]*inboxLock{}}, nil
}

// lock takes the inbox on subject for one operation, waiting no longer
// than ctx allows: a request's erasure that meets a long compaction
// gives up at its deadline. The caller calls unlock.
func (c *Compactor) lock(ctx context.Context, subject string) (unlock func(), err error) {
	c.mu.Lock()
	l := c.locks[subject]
	if l == nil {
		l = &inboxLock{token: make(chan struct{}, 1)}
		c.locks[subject] = l
	}
	l.users++
	c.mu.Unlock()
	leave := func() {
		c.mu.Lock()
		if l.users--; l.users == 0 {
			delete(c.locks, subject)
		}
		c.mu.Unlock()
	}
	select {
	case l.token <- struct{}{}:
		return func() { <-l.token; leave() }, nil
	case <-ctx.Done():
		leave()
		return nil, fmt.Errorf("wait for %s: %w", subject, ctx.Err())
	}
}

// compactorActor is the actor of the events compaction appends: no
// person asked for them.
const compactorActor = "astro-compactor"

// Compacted is what a compaction did.
type Compacted struct {
	Pending   int    // notifications the compaction carries
	Parts     int    // InboxCompacted events appended
	Erased    int    // events removed from the log
	Overwrote bool   // whether they were overwritten, or left to turnover
	Seq       uint64 // the first part's position
}

// Compact compacts the inbox of recipient in workspace.
func (c *Compactor) Compact(ctx context.Context, workspace, recipient string) (Compacted, error) {
	unlock, err := c.lock(ctx, events.Subject(workspace, events.Aggregate{Kind: events.KindInbox, ID: recipient}))
	if err != nil {
		return Compacted{}, err
	}
	defer unlock()
	return c.compact(ctx, workspace, recipient)
}

func (c *Compactor) compact(ctx context.Context, workspace, recipient string) (Compacted, error) {
	agg := events.Aggregate{Kind: events.KindInbox, ID: recipient}
	subject := events.Subject(workspace, agg)
	if err := c.ledger.Begin(ctx, subject); err != nil {
		return Compacted{}, err
	}
	var res commands.Result
	for attempt := 0; ; attempt++ {
		content, err := Delivered(ctx, c.log, subject)
		if err != nil {
			return Compacted{}, err
		}
		now := c.now().UTC().Truncate(time.Microsecond)
		by := commands.Caller{WorkspaceID: workspace, UserID: compactorActor}
		res, err = commands.Run(ctx, c.inboxes, by, agg, now, func(in *Inbox) ([]events.Payload, error) {
			return in.compaction(recipient, events.NewID(now), content, c.cfg.PartBytes)
		})
		if errors.Is(err, errStale) && attempt < 3 {
			continue // sent since the read: read again
		}
		if err != nil {
			return Compacted{}, fmt.Errorf("compact %s: %w", subject, err)
		}
		break
	}
	// The compaction is the parts of the last one appended: a race lost
	// after a first part (another instance's write between two parts)
	// leaves that part behind, before the compaction decided again.
	var (
		out  Compacted
		last string
	)
	for _, e := range slices.Backward(res.Events) {
		p, err := events.Decode(e)
		if err != nil {
			return Compacted{}, fmt.Errorf("compact %s: %w", subject, err)
		}
		part := p.(*events.InboxCompacted)
		if last == "" {
			last = part.CompactionID
		}
		if part.CompactionID != last {
			break
		}
		out.Parts++
		out.Pending += len(part.Notifications)
		out.Seq = e.Seq
	}
	if out.Parts == 0 {
		return Compacted{}, fmt.Errorf("compact %s: nothing appended", subject)
	}
	overwrite, err := c.overwrites(ctx, subject)
	if err != nil {
		return out, err
	}
	out.Overwrote = overwrite
	if out.Erased, err = c.finish(ctx, subject, out.Seq, out.Overwrote, false); err != nil {
		return out, err
	}
	return out, nil
}

// overwrites tells whether a compaction of subject overwrites what it
// removes: unless the log's turnover drops its blocks within a quarter of
// EraseWithin.
func (c *Compactor) overwrites(ctx context.Context, subject string) (bool, error) {
	turnover, err := c.erase.Turnover(ctx, subject)
	if err != nil {
		return false, err
	}
	return turnover <= 0 || turnover > c.cfg.EraseWithin/4, nil
}

// Erased is the receipt of an inbox's erasure.
type Erased struct {
	ErasureID     string
	Notifications int    // pending when it was erased
	Events        int    // removed from the log
	Seq           uint64 // the InboxErased event's position
}

// Erase erases every notification of recipient's inbox in the caller's
// workspace, on the caller's request: an InboxErased event by the caller,
// then everything before it removed, the snapshots last.
func (c *Compactor) Erase(ctx context.Context, by commands.Caller, recipient string) (Erased, error) {
	return c.eraseInbox(ctx, by, recipient, true)
}

// EraseInWorkspace is Erase for one inbox of a workspace's erasure, which
// drops the snapshots itself, once, after its last inbox: dropped after
// each, the whole service would run without snapshots for as long as a
// large workspace's erasure takes. One cut short drops them as Erase's.
func (c *Compactor) EraseInWorkspace(ctx context.Context, by commands.Caller, recipient string) (Erased, error) {
	return c.eraseInbox(ctx, by, recipient, false)
}

func (c *Compactor) eraseInbox(ctx context.Context, by commands.Caller, recipient string, dropSnapshots bool) (Erased, error) {
	if !events.ValidToken(recipient) {
		return Erased{}, commands.Invalid(map[string][]string{"userId": {"The user id must be 1 to 64 letters, digits, '-' or '_'."}})
	}
	agg := events.Aggregate{Kind: events.KindInbox, ID: recipient}
	subject := events.Subject(by.WorkspaceID, agg)
	unlock, err := c.lock(ctx, subject)
	if err != nil {
		return Erased{}, err
	}
	defer unlock()
	if err := c.ledger.Begin(ctx, subject); err != nil {
		return Erased{}, err
	}
	now := c.now().UTC().Truncate(time.Microsecond)
	erasureID := events.NewID(now)
	res, err := commands.Run(ctx, c.inboxes, by, agg, now, func(in *Inbox) ([]events.Payload, error) {
		return []events.Payload{events.InboxErased{ErasureID: erasureID, Notifications: in.Len()}}, nil
	})
	if err != nil {
		return Erased{}, fmt.Errorf("erase %s: %w", subject, err)
	}
	// The cut is the erasure's own event. A retry of a request whose first
	// attempt appended it (and then failed) finds it in the log, maybe
	// with notifications sent after it, which the erasure must not take;
	// its receipt is the one that event records.
	var out Erased
	for _, e := range slices.Concat(res.Events, res.Earlier) {
		if p, err := events.Decode(e); err == nil {
			if v, ok := p.(*events.InboxErased); ok {
				out.ErasureID, out.Notifications, out.Seq = v.ErasureID, v.Notifications, e.Seq
			}
		}
	}
	if out.Seq == 0 {
		return Erased{}, fmt.Errorf("erase %s: the erasure's event is neither appended nor in the log", subject)
	}
	if out.Events, err = c.finish(ctx, subject, out.Seq, true, dropSnapshots); err != nil {
		return out, err
	}
	return out, nil
}

// finish erases every event of subject before cut, and its parked copies,
// and with dropSnapshots every snapshot (a user's erasure, where the
// inbox's holds what it erased; a workspace's drops them once, itself),
// and closes the ledger's entry.
func (c *Compactor) finish(ctx context.Context, subject string, cut uint64, overwrite, dropSnapshots bool) (int, error) {
	n, err := c.erase.EraseBefore(ctx, subject, cut, overwrite)
	if err != nil {
		return n, err
	}
	if _, err := c.erase.EraseParked(ctx, subject); err != nil {
		return n, err
	}
	if dropSnapshots {
		if err := c.erase.EraseSnapshots(ctx); err != nil {
			return n, err
		}
	}
	return n, c.ledger.Done(ctx, subject)
}

// Finish completes the erasure of subject that a crash cut short: it
// erases what precedes the inbox's last erasure or last complete
// compaction. A last compaction whose parts did not all land is done
// again: its first part restarted the inbox's count of events, so an idle
// inbox would never be due again, and what it was to erase would stay.
func (c *Compactor) Finish(ctx context.Context, subject string) error {
	unlock, err := c.lock(ctx, subject)
	if err != nil {
		return err
	}
	defer unlock()
	var cut, first uint64
	var compaction string
	incomplete, erased := false, false
	err = c.log.ReadAll(ctx, subject, func(e events.Event) error {
		switch e.Type {
		case events.InboxErased{}.EventType():
			cut, incomplete, erased = e.Seq, false, true
		case events.InboxCompacted{}.EventType():
			p, err := events.Decode(e)
			if err != nil {
				return err
			}
			part := p.(*events.InboxCompacted)
			if part.Part == 1 {
				first, compaction, incomplete = e.Seq, part.CompactionID, true
			}
			if part.CompactionID == compaction && part.Part == part.Parts {
				cut, incomplete = first, false
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("finish erasure of %s: %w", subject, err)
	}
	if incomplete {
		ws, a, err := events.ParseSubject(subject)
		if err != nil {
			return fmt.Errorf("finish erasure of %s: %w", subject, err)
		}
		// What an erasure before it removes is overwritten, as the user
		// asked; the new compaction may leave the rest to the turnover.
		if cut > 0 {
			if _, err := c.erase.EraseBefore(ctx, subject, cut, true); err != nil {
				return fmt.Errorf("finish erasure of %s: %w", subject, err)
			}
		}
		// The snapshots go before the compaction, which closes the
		// entry: closed first, a stop in between would leave them.
		if erased {
			if err := c.erase.EraseSnapshots(ctx); err != nil {
				return fmt.Errorf("finish erasure of %s: %w", subject, err)
			}
		}
		_, err = c.compact(ctx, ws, a.ID)
		return err
	}
	if cut == 0 {
		return c.ledger.Done(ctx, subject)
	}
	// Finishing is rare (after a crash): overwrite, whatever the turnover.
	_, err = c.finish(ctx, subject, cut, true, erased)
	return err
}

// FinishAll finishes every erasure of an inbox the ledger holds that began
// before begunBefore (any, when it is zero); other subjects are left to
// whoever began them.
func (c *Compactor) FinishAll(ctx context.Context, begunBefore time.Time) error {
	subjects, err := c.ledger.Unfinished(ctx)
	if err != nil {
		return err
	}
	for _, s := range subjects {
		if _, a, err := events.ParseSubject(s); err != nil || a.Kind != events.KindInbox {
			continue
		}
		ok, err := c.ledger.Claim(ctx, s, begunBefore)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := c.Finish(ctx, s); err != nil {
			return err
		}
		c.cfg.Logger.Info("finished an inbox erasure cut short", "subject", s)
	}
	return nil
}

// Delivered reads every notification the history of the inbox on subject
// holds, deleted since or not, by id: its content and the position it was
// delivered at (Seq), from its NotificationSent or from the compaction
// that restates it. A compaction restates the pending ones from it. The
// content is in today's forms (events.CompactedNotification.Normal): the
// events it came from, which an older Astro may have written, leave the
// log with the compaction, and what restates them is written now, as
// today's Astro writes.
func Delivered(ctx context.Context, log History, subject string) (map[events.UUID]events.CompactedNotification, error) {
	content := map[events.UUID]events.CompactedNotification{}
	err := eachDelivered(ctx, log, subject, nil, func(id events.UUID, n events.CompactedNotification) { content[id] = n.Normal() })
	if err != nil {
		return nil, err
	}
	return content, nil
}

// DeliveredAt is the position Delivered gives notification id, 0 when the
// history holds none: a notifications page after one the user deleted is
// cut there. It decodes only the events that name id, and keeps no
// content, since a caller's lastId, even a made-up one, leads here.
func DeliveredAt(ctx context.Context, log History, subject string, id events.UUID) (uint64, error) {
	var seq uint64
	err := eachDelivered(ctx, log, subject, []byte(id.String()), func(got events.UUID, n events.CompactedNotification) {
		if got == id {
			seq = n.Seq
		}
	})
	return seq, err
}

// eachDelivered calls fn for each notification the history of subject
// delivers, in order, skipping events whose data does not contain naming
// (all, when nil) without decoding them.
func eachDelivered(ctx context.Context, log History, subject string, naming []byte, fn func(events.UUID, events.CompactedNotification)) error {
	err := log.ReadAll(ctx, subject, func(e events.Event) error {
		switch e.Type {
		case events.NotificationSent{}.EventType(), events.InboxCompacted{}.EventType():
		default:
			return nil // no content
		}
		if naming != nil && !bytes.Contains(e.Data, naming) {
			return nil
		}
		p, err := events.Decode(e)
		if err != nil {
			return err
		}
		switch p := p.(type) {
		case *events.NotificationSent:
			if id, ok := events.ParseUUID(p.NotificationID); ok {
				fn(id, events.CompactedNotification{
					NotificationID: p.NotificationID, SenderID: p.SenderID, NotificationType: p.NotificationType,
					Subject: p.Subject, Message: p.Message, Data: p.Data, CreateDate: p.CreateDate, Seq: e.Seq,
				})
			}
		case *events.InboxCompacted:
			for _, n := range p.Notifications {
				if id, ok := events.ParseUUID(n.NotificationID); ok {
					n.ReadDate = nil // the inbox says what is read
					fn(id, n)
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read %s: %w", subject, err)
	}
	return nil
}

// errStale: a pending notification's content was not in the history read
// before deciding, so it was sent since; read again.
var errStale = errors.New("inbox changed since its history was read")

// compaction decides the parts of a compaction restating the inbox, with
// each pending notification's content from content.
func (in *Inbox) compaction(recipient, id string, content map[events.UUID]events.CompactedNotification, partBytes int) ([]events.Payload, error) {
	ids := make([]string, len(in.items))
	var parts []events.Payload
	cur := events.InboxCompacted{RecipientID: recipient, CompactionID: id, Notifications: []events.CompactedNotification{}}
	size := 0
	for i, it := range in.items {
		n, ok := content[it.id]
		if !ok {
			return nil, errStale
		}
		ids[i] = n.NotificationID
		if it.read != 0 {
			at := time.UnixMicro(it.read).UTC()
			n.ReadDate = &at
		}
		// Escaping can make text six times its length in JSON: weigh
		// what will be sent.
		b, err := json.Marshal(n)
		if err != nil {
			return nil, err
		}
		weight := len(b) + len(n.NotificationID) + 3 // and its place in part 1's id list
		if size > 0 && size+weight > partBytes {
			parts = append(parts, cur)
			cur = events.InboxCompacted{RecipientID: recipient, CompactionID: id, Notifications: []events.CompactedNotification{}}
			size = 0
		}
		cur.Notifications = append(cur.Notifications, n)
		size += weight
	}
	parts = append(parts, cur)
	for i := range parts {
		p := parts[i].(events.InboxCompacted)
		p.Part, p.Parts = i+1, len(parts)
		if i == 0 {
			p.NotificationIDs = slices.Clip(ids)
		}
		parts[i] = p
	}
	return parts, nil
}

// Due lists inboxes due for compaction.
type Due interface {
	// Due lists at most limit inboxes that had at least events events
	// since their last compaction, or had any and hold one from before
	// olderThan; with idle, also those that had none since a compaction
	// from before olderThan, after every inbox that had some.
	Due(ctx context.Context, events int, olderThan time.Time, idle bool, limit int) ([]DueInbox, error)
}

// DueInbox names an inbox due for compaction.
type DueInbox struct{ WorkspaceID, RecipientID string }

// Schedule says when inboxes are compacted.
type Schedule struct {
	// Every compacts an inbox once it has had this many events since its
	// last compaction: its log holds at most its pending notifications
	// (in the compaction) plus about this many events. Default 1,000.
	Every int
	// Poll is how often the due inboxes are looked for. Default a minute,
	// or a tenth of the compactor's EraseWithin when that is less.
	Poll time.Duration
	// Batch is the most inboxes compacted in one round. Default 1,000.
	Batch int
	// Abandoned: an erasure begun this long ago and not done was cut
	// short (its request's deadline, a failure) while the service ran on,
	// and a round finishes it. Default 2 minutes, past any request's
	// bound.
	Abandoned time.Duration
}

func (s *Schedule) defaults(eraseWithin time.Duration) {
	if s.Every <= 0 {
		s.Every = 1000
	}
	if s.Poll <= 0 {
		s.Poll = min(time.Minute, eraseWithin/10)
	}
	if s.Batch <= 0 {
		s.Batch = 1000
	}
	if s.Abandoned <= 0 {
		s.Abandoned = 2 * time.Minute
	}
}

// Run compacts the inboxes due, every Poll, until ctx ends. It first
// finishes the erasures a stop cut short, then in every round those
// abandoned since (Schedule.Abandoned). An inbox just compacted drops off
// the due list once the projector applies its compaction, well within a
// Poll.
func (c *Compactor) Run(ctx context.Context, due Due, s Schedule) error {
	s.defaults(c.cfg.EraseWithin)
	started := false
	t := time.NewTicker(s.Poll)
	defer t.Stop()
	for {
		var before time.Time // at the start, every one
		if started {
			before = c.now().Add(-s.Abandoned)
		}
		if err := c.FinishAll(ctx, before); err != nil && ctx.Err() == nil {
			c.cfg.Logger.Warn("finishing erasures; trying again next round", "err", err)
		}
		// Past the first round, only abandoned ones: another instance may
		// be finishing one, or compacting, right now.
		started = true
		c.round(ctx, due, s)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// round compacts the inboxes due now. When compactions leave what they
// remove to the log's turnover, inboxes idle since their compaction are
// due too once it is half EraseWithin old: a block is dropped only when
// nothing in it is live, and their parts would keep it, with the content
// others removed in it, for good. Compacting them again moves their parts
// to the block being written. They come after the inboxes with events,
// so they take no round from those; overwriting leaves nothing to keep.
func (c *Compactor) round(ctx context.Context, due Due, s Schedule) {
	overwrite, err := c.overwrites(ctx, events.KindSubjects(events.KindInbox))
	if err != nil {
		if ctx.Err() == nil {
			c.cfg.Logger.Warn("compaction: the log's turnover", "err", err)
		}
		return
	}
	inboxes, err := due.Due(ctx, s.Every, c.now().Add(-c.cfg.EraseWithin/2), !overwrite, s.Batch)
	if err != nil {
		if ctx.Err() == nil {
			c.cfg.Logger.Warn("compaction: listing the inboxes due", "err", err)
		}
		return
	}
	for _, in := range inboxes {
		if ctx.Err() != nil {
			return
		}
		start := time.Now()
		res, err := c.Compact(ctx, in.WorkspaceID, in.RecipientID)
		if err != nil {
			if ctx.Err() == nil {
				c.cfg.Logger.Warn("compaction failed; the inbox stays due", "workspace", in.WorkspaceID, "recipient", in.RecipientID, "err", err)
			}
			continue
		}
		c.cfg.Logger.Debug("inbox compacted", "workspace", in.WorkspaceID, "recipient", in.RecipientID,
			"pending", res.Pending, "parts", res.Parts, "erased", res.Erased, "overwrote", res.Overwrote, "took", time.Since(start))
	}
}
