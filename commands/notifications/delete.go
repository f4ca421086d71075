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
	res, err := h.execute(ctx, cmd.Caller, cmd.Caller.UserID, func(in *Inbox, _ time.Time) ([]events.Payload, error) {
		return in.Delete(cmd.Caller.UserID, cmd.NotificationID)
	})
	if commands.ErrorCode(err) != commands.ENotFound {
		return res, err
	}
	// Gone: a retry of this very request may be what deleted it.
	id, _ := events.ParseUUID(cmd.NotificationID)
	deleted := events.NotificationDeleted{NotificationID: id.String(), RecipientID: cmd.Caller.UserID, Reason: events.ReasonUser}
	e, ok, ferr := commands.Earlier(ctx, h.inboxes, cmd.Caller, events.Aggregate{Kind: events.KindInbox, ID: cmd.Caller.UserID}, deleted)
	switch {
	case ferr != nil:
		return commands.Result{}, ferr
	case ok:
		return commands.Result{Seq: e.Seq, Earlier: []events.Event{e}}, nil
	}
	return res, err
}
