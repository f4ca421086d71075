package notifications

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"astro/commands"
	"astro/events"
)

// MaxPending is how many pending (read or unread, not deleted)
// notifications a user keeps; sending one more deletes the oldest.
const MaxPending = 1000

// SnapshotName names the inbox's snapshot shape; a new shape gets a new
// name, so old snapshots are ignored instead of misread.
const SnapshotName = "inbox.v2"

// Inbox is one user's pending notifications, oldest first, holding only
// what decisions need: 24 bytes a notification. At most MaxPending of
// them, so a linear scan (a few microseconds) finds any, with no index to
// keep.
type Inbox struct {
	items []item
}

type item struct {
	id   events.UUID
	read int64 // read date in Unix microseconds (what the log keeps); 0: unread
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
		id, err := parseID(p.NotificationID)
		if err != nil {
			return err
		}
		in.items = append(in.items, item{id: id})
	case *events.NotificationRead:
		in.setRead(p.NotificationID, p.ReadDate.UnixMicro())
	case *events.NotificationUnread:
		in.setRead(p.NotificationID, 0)
	case *events.NotificationDeleted:
		if i := in.find(p.NotificationID); i >= 0 {
			in.items = slices.Delete(in.items, i, i+1)
		}
	case *events.AllNotificationsRead:
		for _, id := range p.NotificationIDs {
			in.setRead(id, p.ReadDate.UnixMicro())
		}
	case *events.AllNotificationsDeleted:
		gone := make(map[events.UUID]bool, len(p.NotificationIDs))
		for _, s := range p.NotificationIDs {
			if id, ok := events.ParseUUID(s); ok {
				gone[id] = true
			}
		}
		in.items = slices.DeleteFunc(in.items, func(it item) bool { return gone[it.id] })
	case *events.InboxCompacted:
		return in.restate(p)
	case *events.InboxErased:
		in.items = nil
	default:
		return fmt.Errorf("inbox: unexpected event %s", e.Type)
	}
	return nil
}

// restate folds one part of a compaction. Onto the history it replaces it
// changes nothing; onto an empty inbox (that history gone) the parts
// rebuild it: the first says which notifications are pending and in what
// order, each says the read state of those it carries.
func (in *Inbox) restate(p *events.InboxCompacted) error {
	if p.Part == 1 {
		read := make(map[events.UUID]int64, len(in.items))
		for _, it := range in.items {
			read[it.id] = it.read
		}
		items := make([]item, 0, len(p.NotificationIDs))
		for _, s := range p.NotificationIDs {
			id, err := parseID(s)
			if err != nil {
				return err
			}
			items = append(items, item{id: id, read: read[id]})
		}
		in.items = items
	}
	for _, n := range p.Notifications {
		var read int64
		if n.ReadDate != nil {
			read = n.ReadDate.UnixMicro()
		}
		in.setRead(n.NotificationID, read)
	}
	return nil
}

func parseID(s string) (events.UUID, error) {
	id, ok := events.ParseUUID(s)
	if !ok {
		return id, fmt.Errorf("inbox: notification id %q is not a UUID", s)
	}
	return id, nil
}

// find returns the index of notification id, or -1. Newest first: recent
// notifications are the ones people act on.
func (in *Inbox) find(id string) int {
	u, ok := events.ParseUUID(id)
	if !ok {
		return -1
	}
	for i := len(in.items) - 1; i >= 0; i-- {
		if in.items[i].id == u {
			return i
		}
	}
	return -1
}

func (in *Inbox) setRead(id string, micros int64) {
	if i := in.find(id); i >= 0 {
		in.items[i].read = micros
	}
}

// Size is the inbox's memory in bytes, for the aggregate cache's budget.
func (in *Inbox) Size() int { return 64 + cap(in.items)*recordSize }

// Len is the number of pending notifications.
func (in *Inbox) Len() int { return len(in.items) }

// Has reports whether notification id is pending.
func (in *Inbox) Has(id string) bool { return in.find(id) >= 0 }

// pending returns the index of a pending notification, or ENotFound:
// unknown, deleted and foreign notifications are all simply not in this
// inbox.
func (in *Inbox) pending(id string) (int, error) {
	i := in.find(id)
	if i < 0 {
		return -1, commands.Errorf(commands.ENotFound, "The notification was not found.")
	}
	return i, nil
}

// Send decides delivering notification sent, after the overflow deletions
// that make room for it. Room first: if only a prefix of these reaches the
// log, the inbox still never holds more than MaxPending.
func (in *Inbox) Send(sent events.NotificationSent) []events.Payload {
	var out []events.Payload
	for _, it := range in.items[:max(0, len(in.items)+1-MaxPending)] {
		out = append(out, events.NotificationDeleted{NotificationID: it.id.String(), RecipientID: sent.RecipientID, Reason: events.ReasonOverflow})
	}
	return append(out, sent)
}

// Delete decides deleting one pending notification of recipient.
func (in *Inbox) Delete(recipient, id string) ([]events.Payload, error) {
	i, err := in.pending(id)
	if err != nil {
		return nil, err
	}
	return []events.Payload{events.NotificationDeleted{NotificationID: in.items[i].id.String(), RecipientID: recipient, Reason: events.ReasonUser}}, nil
}

// MarkRead decides marking a notification read at now, and returns its
// read date: a notification read before stays as it is and keeps the date
// it was first read.
func (in *Inbox) MarkRead(recipient, id string, now time.Time) (time.Time, []events.Payload, error) {
	i, err := in.pending(id)
	if err != nil {
		return time.Time{}, nil, err
	}
	if r := in.items[i].read; r != 0 {
		return time.UnixMicro(r).UTC(), nil, nil
	}
	return now, []events.Payload{events.NotificationRead{NotificationID: in.items[i].id.String(), RecipientID: recipient, ReadDate: now}}, nil
}

// MarkUnread decides marking a notification unread; an unread one stays
// as it is.
func (in *Inbox) MarkUnread(recipient, id string) ([]events.Payload, error) {
	i, err := in.pending(id)
	if err != nil || in.items[i].read == 0 {
		return nil, err
	}
	return []events.Payload{events.NotificationUnread{NotificationID: in.items[i].id.String(), RecipientID: recipient}}, nil
}

// MarkAllRead decides marking every unread notification read at now, and
// returns when all were read: now, or when none is unread (nothing to
// decide) the newest read date the inbox holds, as MarkRead answers a
// notification already read; now for an empty inbox.
func (in *Inbox) MarkAllRead(recipient string, now time.Time) (time.Time, []events.Payload) {
	var ids []string
	var newest int64
	for _, it := range in.items {
		if it.read == 0 {
			ids = append(ids, it.id.String())
		}
		newest = max(newest, it.read)
	}
	switch {
	case len(ids) > 0:
		return now, []events.Payload{events.AllNotificationsRead{RecipientID: recipient, NotificationIDs: ids, ReadDate: now}}
	case newest > 0:
		return time.UnixMicro(newest).UTC(), nil
	}
	return now, nil
}

// DeleteAll decides deleting every pending notification; nothing when
// none is pending.
func (in *Inbox) DeleteAll(recipient string) []events.Payload {
	if len(in.items) == 0 {
		return nil
	}
	ids := make([]string, len(in.items))
	for i, it := range in.items {
		ids[i] = it.id.String()
	}
	return []events.Payload{events.AllNotificationsDeleted{RecipientID: recipient, NotificationIDs: ids, Reason: events.ReasonBulk}}
}

// Clone returns a copy that later events to either do not reach: a
// reader that follows the log folds its own copy, apart from the store's.
func (in *Inbox) Clone() *Inbox { return &Inbox{items: slices.Clone(in.items)} }

// Unread counts the unread pending notifications.
func (in *Inbox) Unread() int {
	n := 0
	for _, it := range in.items {
		if it.read == 0 {
			n++
		}
	}
	return n
}

// inboxSnapshot is the snapshot shape: the items as 24-byte records (id,
// then the read date as big-endian Unix microseconds).
type inboxSnapshot struct {
	Items []byte `json:"items"`
}

const recordSize = 16 + 8

// MarshalJSON encodes the snapshot.
func (in *Inbox) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, len(in.items)*recordSize)
	for _, it := range in.items {
		b = append(b, it.id[:]...)
		b = binary.BigEndian.AppendUint64(b, uint64(it.read))
	}
	return json.Marshal(inboxSnapshot{Items: b})
}

// UnmarshalJSON decodes a snapshot.
func (in *Inbox) UnmarshalJSON(data []byte) error {
	var s inboxSnapshot
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	if len(s.Items)%recordSize != 0 {
		return fmt.Errorf("inbox snapshot: %d bytes is not a whole number of records", len(s.Items))
	}
	in.items = make([]item, 0, len(s.Items)/recordSize)
	for b := s.Items; len(b) > 0; b = b[recordSize:] {
		var it item
		copy(it.id[:], b[:16])
		it.read = int64(binary.BigEndian.Uint64(b[16:recordSize]))
		in.items = append(in.items, it)
	}
	return nil
}
