package notifications

import (
	"fmt"
	"time"

	"astro/commands"
	"astro/events"
)

// MaxPending is how many pending (read or unread, not deleted)
// notifications a user keeps; sending one more deletes the oldest.
const MaxPending = 1000

// Inbox is one user's pending notifications, oldest first.
type Inbox struct {
	Items []Item `json:"items"`
	pos   map[string]int
}

// Item is what decisions need of a pending notification.
type Item struct {
	ID       string     `json:"id"`
	ReadDate *time.Time `json:"readDate,omitempty"`
}

// NewInbox returns an empty inbox.
func NewInbox() *Inbox { return &Inbox{} }

// Apply implements commands.Aggregate.
func (in *Inbox) Apply(e events.Event) error {
	p, err := events.Decode(e)
	if err != nil {
		return err
	}
	switch p := p.(type) {
	case *events.NotificationSent:
		in.Items = append(in.Items, Item{ID: p.NotificationID})
		in.index()[p.NotificationID] = len(in.Items) - 1
	case *events.NotificationRead:
		if i, ok := in.find(p.NotificationID); ok {
			d := p.ReadDate
			in.Items[i].ReadDate = &d
		}
	case *events.NotificationUnread:
		if i, ok := in.find(p.NotificationID); ok {
			in.Items[i].ReadDate = nil
		}
	case *events.NotificationDeleted:
		in.remove(map[string]bool{p.NotificationID: true})
	case *events.AllNotificationsRead:
		for _, id := range p.NotificationIDs {
			if i, ok := in.find(id); ok {
				d := p.ReadDate
				in.Items[i].ReadDate = &d
			}
		}
	case *events.AllNotificationsDeleted:
		gone := make(map[string]bool, len(p.NotificationIDs))
		for _, id := range p.NotificationIDs {
			gone[id] = true
		}
		in.remove(gone)
	default:
		return fmt.Errorf("inbox: unexpected event %s", e.Type)
	}
	return nil
}

func (in *Inbox) index() map[string]int {
	if in.pos == nil {
		in.pos = make(map[string]int, len(in.Items))
		for i, it := range in.Items {
			in.pos[it.ID] = i
		}
	}
	return in.pos
}

func (in *Inbox) find(id string) (int, bool) {
	i, ok := in.index()[id]
	return i, ok
}

func (in *Inbox) remove(gone map[string]bool) {
	kept := in.Items[:0]
	for _, it := range in.Items {
		if !gone[it.ID] {
			kept = append(kept, it)
		}
	}
	clear(in.Items[len(kept):])
	in.Items = kept
	in.pos = nil
}

func notFound() error {
	return commands.Errorf(commands.ENotFound, "The notification was not found.")
}

// Pending returns the item id, or ENotFound: unknown, deleted and foreign
// notifications are all simply not in this inbox.
func (in *Inbox) Pending(id string) (Item, error) {
	i, ok := in.find(id)
	if !ok {
		return Item{}, notFound()
	}
	return in.Items[i], nil
}

// Send decides delivering notification sent, after the overflow deletions
// that make room for it. Room first: if only a prefix of these reaches the
// log, the inbox still never holds more than MaxPending.
func (in *Inbox) Send(sent events.NotificationSent) []events.Payload {
	var out []events.Payload
	for _, it := range in.Items[:max(0, len(in.Items)+1-MaxPending)] {
		out = append(out, events.NotificationDeleted{NotificationID: it.ID, RecipientID: sent.RecipientID, Reason: events.ReasonOverflow})
	}
	return append(out, sent)
}

// Unread lists the ids of unread pending notifications, oldest first.
func (in *Inbox) Unread() []string {
	var ids []string
	for _, it := range in.Items {
		if it.ReadDate == nil {
			ids = append(ids, it.ID)
		}
	}
	return ids
}

// IDs lists every pending notification id, oldest first.
func (in *Inbox) IDs() []string {
	ids := make([]string, len(in.Items))
	for i, it := range in.Items {
		ids[i] = it.ID
	}
	return ids
}
