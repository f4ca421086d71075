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
	res, err := h.execute(ctx, cmd.Caller, cmd.Caller.UserID, func(in *Inbox, now time.Time) ([]events.Payload, error) {
		it, err := in.Pending(cmd.NotificationID)
		if err != nil {
			return nil, err
		}
		if it.ReadDate != nil {
			readDate = *it.ReadDate
			return nil, nil
		}
		readDate = now
		return []events.Payload{events.NotificationRead{NotificationID: cmd.NotificationID, RecipientID: cmd.Caller.UserID, ReadDate: now}}, nil
	})
	return readDate, res, err
}
