package notifications

import (
	"context"
	"time"

	"astro/commands"
	"astro/events"
)

// Delete deletes one of the caller's pending notifications.
type Delete struct {
	Caller         commands.Caller
	NotificationID string
}

// DeleteHandler handles Delete.
type DeleteHandler struct{ deps }

// Handle deletes the notification; an unknown, already deleted or foreign
// one is ENotFound.
func (h DeleteHandler) Handle(ctx context.Context, cmd Delete) (commands.Result, error) {
	if err := validID(cmd.NotificationID); err != nil {
		return commands.Result{}, err
	}
	return h.execute(ctx, cmd.Caller, cmd.Caller.UserID, func(in *Inbox, _ time.Time) ([]events.Payload, error) {
		return in.Delete(cmd.Caller.UserID, cmd.NotificationID)
	})
}
