package notifications

import (
	"context"
	"time"

	"astro/commands"
	"astro/events"
)

// MarkAllRead marks every unread notification of the caller read.
type MarkAllRead struct{ Caller commands.Caller }

// MarkAllReadHandler handles MarkAllRead.
type MarkAllReadHandler struct{ deps }

// Handle returns the read date; with nothing unread it appends nothing.
func (h MarkAllReadHandler) Handle(ctx context.Context, cmd MarkAllRead) (time.Time, commands.Result, error) {
	var at time.Time
	res, err := h.execute(ctx, cmd.Caller, cmd.Caller.UserID, func(in *Inbox, now time.Time) ([]events.Payload, error) {
		var ps []events.Payload
		at, ps = in.MarkAllRead(cmd.Caller.UserID, now)
		return ps, nil
	})
	return at, res, err
}

// DeleteAll deletes every pending notification of the caller.
type DeleteAll struct{ Caller commands.Caller }

// DeleteAllHandler handles DeleteAll.
type DeleteAllHandler struct{ deps }

// Handle deletes them all; with none pending it appends nothing.
func (h DeleteAllHandler) Handle(ctx context.Context, cmd DeleteAll) (commands.Result, error) {
	return h.execute(ctx, cmd.Caller, cmd.Caller.UserID, func(in *Inbox, _ time.Time) ([]events.Payload, error) {
		return in.DeleteAll(cmd.Caller.UserID), nil
	})
}
