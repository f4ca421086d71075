package notifications

import (
	"context"
	"errors"
	"time"

	"astro/commands"
	"astro/events"
)

// Inboxes is the store of inbox aggregates.
type Inboxes = commands.Store[*Inbox]

// Handlers runs the notification commands; each is one struct and one
// handler.
type Handlers struct {
	Send        SendHandler
	Delete      DeleteHandler
	MarkRead    MarkReadHandler
	MarkUnread  MarkUnreadHandler
	MarkAllRead MarkAllReadHandler
	DeleteAll   DeleteAllHandler
}

// NewHandlers wires every handler to the inbox store and the clock.
func NewHandlers(inboxes *Inboxes, now func() time.Time) (*Handlers, error) {
	if inboxes == nil || now == nil {
		return nil, errors.New("notifications: NewHandlers needs an inbox store and a clock")
	}
	d := deps{inboxes: inboxes, now: now}
	return &Handlers{
		Send:        SendHandler{d},
		Delete:      DeleteHandler{d},
		MarkRead:    MarkReadHandler{d},
		MarkUnread:  MarkUnreadHandler{d},
		MarkAllRead: MarkAllReadHandler{d},
		DeleteAll:   DeleteAllHandler{d},
	}, nil
}

type deps struct {
	inboxes *Inboxes
	now     func() time.Time
}

// execute decides a command against the inbox of recipient in the caller's
// workspace. Times are cut to microseconds, what PostgreSQL keeps, so the
// log and the read model agree to the digit.
func (d deps) execute(ctx context.Context, c commands.Caller, recipient string, decide func(*Inbox, time.Time) ([]events.Payload, error)) (commands.Result, error) {
	now := d.now().UTC().Truncate(time.Microsecond)
	agg := events.Aggregate{Kind: events.KindInbox, ID: recipient}
	return commands.Run(ctx, d.inboxes, c, agg, now, func(in *Inbox) ([]events.Payload, error) { return decide(in, now) })
}

// validID checks a notification id from a path.
func validID(id string) error {
	if !events.ValidUUID(id) {
		return commands.Invalid(map[string][]string{"id": {"The id must be a UUID."}})
	}
	return nil
}
