package notifications

import (
	"bytes"
	"context"
	"fmt"

	"astro/events"
)

// Delivered reads every notification the history of the inbox on subject
// holds, deleted since or not, by id: its content and the position it was
// delivered at (Seq), from its NotificationSent or from the compaction
// that restates it. A compaction restates the pending ones from it. The
// content is in today's forms (events.CompactedNotification.Normal): the
// events it came from, which an older Astro may have written, leave the
// log with the compaction, and what restates them is written now, as
// today's Astro writes.
func Delivered(ctx context.Context, log History, subject string) (map[events.UUID]events.CompactedNotification, error) {
	content := map[events.UUID]events.CompactedNotification{}
	err := eachDelivered(ctx, log, subject, nil, func(id events.UUID, n events.CompactedNotification) { content[id] = n.Normal() })
	if err != nil {
		return nil, err
	}
	return content, nil
}

// DeliveredAt is the position Delivered gives notification id, 0 when the
// history holds none: a notifications page after one the user deleted is
// cut there. It decodes only the events that name id, and keeps no
// content, since a caller's lastId, even a made-up one, leads here.
func DeliveredAt(ctx context.Context, log History, subject string, id events.UUID) (uint64, error) {
	var seq uint64
	err := eachDelivered(ctx, log, subject, []byte(id.String()), func(got events.UUID, n events.CompactedNotification) {
		if got == id {
			seq = n.Seq
		}
	})
	return seq, err
}

// eachDelivered calls fn for each notification the history of subject
// delivers, in order, skipping events whose data does not contain naming
// (lower case; all, when nil) in any case without decoding them.
func eachDelivered(ctx context.Context, log History, subject string, naming []byte, fn func(events.UUID, events.CompactedNotification)) error {
	err := log.ReadAll(ctx, subject, func(e events.Event) error {
		switch e.Type {
		case events.NotificationSent{}.EventType(), events.InboxCompacted{}.EventType():
		default:
			return nil // no content
		}
		// An older Astro logged ids as they came, in either case: one
		// that does not show as named may still be it.
		if naming != nil && !bytes.Contains(e.Data, naming) && !bytes.Contains(bytes.ToLower(e.Data), naming) {
			return nil
		}
		p, err := events.Decode(e)
		if err != nil {
			return err
		}
		switch p := p.(type) {
		case *events.NotificationSent:
			if id, ok := events.ParseUUID(p.NotificationID); ok {
				fn(id, events.CompactedNotification{
					NotificationID: p.NotificationID, SenderID: p.SenderID, NotificationType: p.NotificationType,
					Subject: p.Subject, Message: p.Message, Data: p.Data, CreateDate: p.CreateDate, Seq: e.Seq,
				})
			}
		case *events.InboxCompacted:
			for _, n := range p.Notifications {
				if id, ok := events.ParseUUID(n.NotificationID); ok {
					n.ReadDate = nil // the inbox says what is read
					fn(id, n)
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read %s: %w", subject, err)
	}
	return nil
}
