package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"

	"astro/commands"
	"astro/events/natslog"
	"astro/events/natsserver"
)

// appliedSeq is the highest log sequence any read model has applied: a
// log that reached it existed, whatever the NATS server now says.
func appliedSeq(ctx context.Context, db *sqlx.DB) (uint64, error) {
	var seq int64
	if err := db.GetContext(ctx, &seq, `SELECT COALESCE(MAX(seq), 0) FROM projector_checkpoints`); err != nil {
		return 0, fmt.Errorf("read projector checkpoints: %w", err)
	}
	return uint64(seq), nil
}

// logNotReady gives /readyz the reason the log cannot take writes, in
// words for an operator and without internals.
func logNotReady(err error) error {
	msg := "the event log is unreachable; writes fail until it is back"
	switch {
	case errors.Is(err, natslog.ErrStreamMissing):
		msg = "the event stream is missing from NATS; writes fail until it is restored (Astro does not recreate it)"
	case errors.Is(err, natsserver.ErrUnwritable):
		msg = "the event log's store failed a write (is its disk full?); writes fail until it takes them again, which Astro checks every few seconds"
	}
	return &commands.Error{Code: commands.EUnavailable, Message: msg, Err: err}
}
