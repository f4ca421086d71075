package notifications

import (
	"fmt"
	"slices"
	"time"

	"astro/commands"
	"astro/events"
)

// MaxPending is how many pending (read or unread, not deleted)
// notifications a user keeps; sending one more deletes the oldest.
const MaxPending = 1000

// Inbox is one user's pending notifications, oldest first. The index
// points at the items themselves, so removing some (every send at the cap
// removes the oldest) never invalidates it.
type Inbox struct {
	Items []*Item `json:"items"`
	byID  map[string]*Item
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
		it := &Item{ID: p.NotificationID}
		in.Items = append(in.Items, it)
		in.index()[it.ID] = it
	case *events.NotificationRead:
		if it, ok := in.index()[p.NotificationID]; ok {
			d := p.ReadDate
			it.ReadDate = &d
		}
	case *events.NotificationUnread:
		if it, ok := in.index()[p.NotificationID]; ok {
			it.ReadDate = nil
		}
	case *events.NotificationDeleted:
		in.removeOne(p.NotificationID)
	case *events.AllNotificationsRead:
		for _, id := range p.NotificationIDs {
			if it, ok := in.index()[id]; ok {
				d := p.ReadDate
				it.ReadDate = &d
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

// index is built once, after a snapshot is decoded, and kept up to date.
func (in *Inbox) index() map[string]*Item {
	if in.byID == nil {
		in.byID = make(map[string]*Item, len(in.Items))
		for _, it := range in.Items {
			in.byID[it.ID] = it
		}
	}
	return in.byID
}

// removeOne is remove for the common case, a single deletion, with no
// hashing of the items that stay: usually the oldest, found at once.
func (in *Inbox) removeOne(id string) {
	it, ok := in.index()[id]
	if !ok {
		return
	}
	delete(in.byID, id)
	i := slices.Index(in.Items, it)
	in.Items = slices.Delete(in.Items, i, i+1)
}

func (in *Inbox) remove(gone map[string]bool) {
	idx := in.index()
	kept := in.Items[:0]
	for _, it := range in.Items {
		if gone[it.ID] {
			delete(idx, it.ID)
		} else {
			kept = append(kept, it)
		}
	}
	clear(in.Items[len(kept):])
	in.Items = kept
}

func notFound() error {
	return commands.Errorf(commands.ENotFound, "The notification was not found.")
}

// Pending returns the item id, or ENotFound: unknown, deleted and foreign
// notifications are all simply not in this inbox.
func (in *Inbox) Pending(id string) (Item, error) {
	it, ok := in.index()[id]
	if !ok {
		return Item{}, notFound()
	}
	return *it, nil
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
