package notifications

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"astro/commands"
	"astro/events"
)

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
	if out.Events, err = c.finish(ctx, subject, subject, out.Seq, true, dropSnapshots); err != nil {
		return out, err
	}
	return out, nil
}

// finish erases every event of subject before cut, and its parked copies,
// and with dropSnapshots every snapshot (a user's erasure, where the
// inbox's holds what it erased; a workspace's drops them once, itself),
// and closes the ledger's entry, key.
func (c *Compactor) finish(ctx context.Context, subject, key string, cut uint64, overwrite, dropSnapshots bool) (int, error) {
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
	return n, c.ledger.Done(ctx, key)
}

// finishEntry completes the erasure or compaction of subject that a crash
// cut short, and closes its ledger entry, key: it erases what precedes the
// inbox's last erasure or last complete compaction. A last compaction
// whose parts did not all land is done again: its first part restarted the
// inbox's count of events, so an idle inbox would never be due again, and
// what it was to erase would stay.
func (c *Compactor) finishEntry(ctx context.Context, subject, key string) error {
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
		if _, err = c.compact(ctx, ws, a.ID); err != nil {
			return err
		}
		return c.ledger.Done(ctx, key)
	}
	if cut == 0 {
		return c.ledger.Done(ctx, key)
	}
	// Finishing is rare (after a crash): overwrite, whatever the turnover.
	_, err = c.finish(ctx, subject, key, cut, true, erased)
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
	for _, key := range subjects {
		s := strings.TrimPrefix(key, compactionPrefix)
		if _, a, err := events.ParseSubject(s); err != nil || a.Kind != events.KindInbox {
			continue
		}
		ok, err := c.ledger.Claim(ctx, key, begunBefore)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := c.finishEntry(ctx, s, key); err != nil {
			return err
		}
		c.cfg.Logger.Info("finished an inbox erasure or compaction cut short", "subject", s)
	}
	return nil
}
