package natslog_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"astro/events"
)

// EraseBeforeKeeping leaves the events of the kept types and removes the
// rest before the cut, on either stream: on the inboxes' a subject purge
// would take the kept events too.
func TestEraseBeforeKeeping(t *testing.T) {
	for _, tc := range []struct {
		name      string
		kind      string
		overwrite bool
	}{
		{"history", events.KindWorkspace, true},
		{"inbox, overwritten", events.KindInbox, true},
		{"inbox, purged", events.KindInbox, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := openLog(t)
			ctx := t.Context()
			agg := events.Aggregate{Kind: tc.kind, ID: "a1"}
			subject := events.Subject("w1", agg)
			kept := events.InboxErased{ErasureID: "x"}
			sent := events.NotificationSent{NotificationID: "n", RecipientID: "a1", SenderID: "s", NotificationType: "t", Subject: "SECRET", CreateDate: time.Now().UTC()}
			var last uint64
			for i, p := range []events.Payload{sent, kept, sent, kept, sent} {
				e, err := events.New(fmt.Sprint("e", i), meta, agg, p)
				if err != nil {
					t.Fatal(err)
				}
				if last, err = l.Append(ctx, subject, last, e); err != nil {
					t.Fatal(err)
				}
			}
			n, err := l.EraseBeforeKeeping(ctx, subject, last, tc.overwrite, []string{kept.EventType()})
			if err != nil {
				t.Fatal(err)
			}
			var left []string
			if _, err := l.Read(ctx, subject, 0, func(e events.Event) error { left = append(left, e.ID); return nil }); err != nil {
				t.Fatal(err)
			}
			if want := []string{"e1", "e3", "e4"}; n != 2 || !slices.Equal(left, want) {
				t.Errorf("removed %d, left %v; want 2 removed, %v left", n, left, want)
			}
		})
	}
}
