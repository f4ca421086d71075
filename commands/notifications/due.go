package notifications

import (
	"context"
	"time"

	"astro/events"
)

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
