package notifications

import (
	"context"
	"time"

	"astro/commands"
	"astro/events"
)

// MarkUnread marks one of the caller's notifications unread again.
type MarkUnread struct {
	Caller         commands.Caller
	NotificationID string
}

// MarkUnreadHandler handles MarkUnread.
type MarkUnreadHandler struct{ deps }

// Handle returns when the change took effect; an unread notification stays
// as it is.
func (h MarkUnreadHandler) Handle(ctx context.Context, cmd MarkUnread) (time.Time, commands.Result, error) {
	if err := validID(cmd.NotificationID); err != nil {
		return time.Time{}, commands.Result{}, err
	}
	var at time.Time
	res, err := h.execute(ctx, cmd.Caller, cmd.Caller.UserID, func(in *Inbox, now time.Time) ([]events.Payload, error) {
		at = now
		return in.MarkUnread(cmd.Caller.UserID, cmd.NotificationID)
	})
	return at, res, err
}
