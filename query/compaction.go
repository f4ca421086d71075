package query

import (
	"context"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
)

// Inbox names one user's inbox.
type Inbox struct {
	WorkspaceID string `db:"workspace_id"`
	RecipientID string `db:"recipient_id"`
}

// Compactions finds the inboxes due for compaction, from what the
// notifications projector keeps beside each inbox's counts.
type Compactions struct{ due *sqlx.Stmt }

// NewCompactions prepares the query.
func NewCompactions(ctx context.Context, db *sqlx.DB) (*Compactions, error) {
	var q Compactions
	if err := prepare(ctx, db, "compactions", []statement{
		// An inbox with no event since its compaction holds nothing of
		// its own to erase, however old that compaction: it is due
		// again only when asked ($3, the turnover mode, where its live
		// parts keep a block and what others removed in it), and after
		// every inbox with events, so that however many idle ones
		// there are, the rounds reach those first.
		{&q.due, `SELECT workspace_id, recipient_id FROM notification_counts
			WHERE events >= $1 OR ((events > 0 OR $3) AND oldest < $2)
			ORDER BY events = 0, oldest LIMIT $4`},
	}); err != nil {
		return nil, err
	}
	return &q, nil
}

// Due lists at most limit inboxes that had at least events events since
// their last compaction, or had any and hold one from before olderThan
// (that compaction, or their first event); with idle, also those that
// had none since a compaction from before olderThan. Those that had
// events come first, the oldest first, then the idle ones, the oldest
// first.
func (q *Compactions) Due(ctx context.Context, events int, olderThan time.Time, idle bool, limit int) ([]Inbox, error) {
	var out []Inbox
	if err := q.due.SelectContext(ctx, &out, events, olderThan, idle, limit); err != nil {
		return nil, fmt.Errorf("inboxes due for compaction: %w", err)
	}
	return out, nil
}
