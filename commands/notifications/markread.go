package notifications

import (
	"context"
	"time"

	"astro/commands"
	"astro/events"
)

// MarkRead marks one of the caller's notifications read.
type MarkRead struct {
	Caller         commands.Caller
	NotificationID string
}

// MarkReadHandler handles MarkRead.
type MarkReadHandler struct{ deps }

// Handle returns the read date. Marking a read notification read again
// changes nothing and returns the date it was first read.
func (h MarkReadHandler) Handle(ctx context.Context, cmd MarkRead) (time.Time, commands.Result, error) {
	if err := validID(cmd.NotificationID); err != nil {
		return time.Time{}, commands.Result{}, err
	}
	var readDate time.Time
	res, err := h.execute(ctx, cmd.Caller, cmd.Caller.UserID, func(in *Inbox, now time.Time) (ps []events.Payload, err error) {
		readDate, ps, err = in.MarkRead(cmd.Caller.UserID, cmd.NotificationID, now)
		return ps, err
	})
	return readDate, res, err
}
