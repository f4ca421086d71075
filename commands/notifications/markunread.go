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

// Handle marks the notification unread; an unread one stays as it is. The
// answer carries no data (the public document's mark unread has none).
func (h MarkUnreadHandler) Handle(ctx context.Context, cmd MarkUnread) (commands.Result, error) {
	if err := validID(cmd.NotificationID); err != nil {
		return commands.Result{}, err
	}
	return h.execute(ctx, cmd.Caller, cmd.Caller.UserID, func(in *Inbox, _ time.Time) ([]events.Payload, error) {
		return in.MarkUnread(cmd.Caller.UserID, cmd.NotificationID)
	})
}
