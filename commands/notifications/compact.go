package notifications

import (
	"cmp"
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

// LogEraser removes events from the log for good.
type LogEraser interface {
	// EraseBefore removes every event on subject with a sequence below
	// before (0: every event) and returns how many it removed. With
	// overwrite their bytes are overwritten at once; without, they leave
	// the files when the log's turnover drops their block.
	EraseBefore(ctx context.Context, subject string, before uint64, overwrite bool) (int, error)
	// Turnover is how long the log of subject takes to close the block
	// it is writing (0: unknown, or never).
	Turnover(ctx context.Context, subject string) (time.Duration, error)
	// EraseParked erases the parked copies of events on subjects matching
	// filter that the log no longer holds.
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
	// a quarter of it (LogEraser.Turnover), in which case dropping the
	// blocks erases it in time, and then an inbox idle since its
	// compaction is compacted again at that age too: its live parts would
	// keep their block, and whatever others removed in it, for good.
	// Default 24h.
	EraseWithin time.Duration
	Logger      *slog.Logger
}

// Compactor compacts inboxes and erases them on request.
type Compactor struct {
	inboxes *Inboxes
	log     Log
	erase   LogEraser
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
func NewCompactor(store *Inboxes, log Log, erase LogEraser, ledger Ledger, now func() time.Time, cfg CompactorConfig) (*Compactor, error) {
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
	key := compactionKey(subject)
	if err := c.ledger.Begin(ctx, key); err != nil {
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
	// leaves that part behind, before the compaction decided again. A part
	// an earlier attempt of the append got in (answered "duplicate" when
	// its ack was lost) is in Earlier, and as much a part.
	parts := slices.Concat(res.Earlier, res.Events)
	slices.SortFunc(parts, func(a, b events.Event) int { return cmp.Compare(a.Seq, b.Seq) })
	var (
		out   Compacted
		last  string
		first int // the part number of the earliest part found
	)
	for _, e := range slices.Backward(parts) {
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
		first = part.Part
	}
	if out.Parts == 0 {
		return Compacted{}, fmt.Errorf("compact %s: nothing appended", subject)
	}
	if first != 1 {
		// Cutting at a later part would erase the first, which alone
		// restates the pending notifications' ids.
		return Compacted{}, fmt.Errorf("compact %s: its first part is not among what it appended", subject)
	}
	overwrite, err := c.overwrites(ctx, subject)
	if err != nil {
		return out, err
	}
	out.Overwrote = overwrite
	if out.Erased, err = c.finish(ctx, subject, key, out.Seq, out.Overwrote, false); err != nil {
		return out, err
	}
	return out, nil
}

// compactionKey is the ledger's key of a compaction of subject, beside an
// erasure's (subject itself): each closes its own entry only. The lock
// that keeps them apart is one process's, and a compaction on one instance
// that closed the entry of an erasure under way on another would leave
// that erasure, cut short, for nobody to finish. A prefix, since a suffix
// could be a user's id ("….inbox.compaction").
func compactionKey(subject string) string { return compactionPrefix + subject }

const compactionPrefix = "compaction."

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
