package notifications

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"astro/commands"
	"astro/events"
)

func apply(t testing.TB, in *Inbox, ps ...events.Payload) {
	t.Helper()
	for _, p := range ps {
		e, err := events.New("id", events.Meta{WorkspaceID: "w", Time: time.Now()}, events.Aggregate{Kind: events.KindInbox, ID: "u"}, p)
		if err != nil {
			t.Fatal(err)
		}
		if err := in.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
}

func sent(id string) events.NotificationSent {
	return events.NotificationSent{NotificationID: id, RecipientID: "u"}
}

func TestSendOverflowDeletesOldest(t *testing.T) {
	in := NewInbox()
	for i := range MaxPending {
		apply(t, in, sent(fmt.Sprint(i)))
	}
	ps := in.Send(sent("new"))
	if len(ps) != 2 {
		t.Fatalf("decided %d events, want send + one overflow deletion", len(ps))
	}
	del, ok := ps[0].(events.NotificationDeleted)
	if !ok || del.NotificationID != "0" || del.Reason != events.ReasonOverflow {
		t.Fatalf("overflow decision %+v: want the deletion first", ps[0])
	}
	if _, ok := ps[1].(events.NotificationSent); !ok {
		t.Fatalf("the send is not last: %+v", ps[1])
	}
	apply(t, in, ps...)
	if len(in.Items) != MaxPending || in.Items[0].ID != "1" || in.Items[MaxPending-1].ID != "new" {
		t.Fatalf("after overflow: %d items, oldest %s, newest %s", len(in.Items), in.Items[0].ID, in.Items[len(in.Items)-1].ID)
	}
}

func TestInboxDecisions(t *testing.T) {
	in := NewInbox()
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	apply(t, in, sent("a"), sent("b"), sent("c"),
		events.NotificationRead{NotificationID: "b", ReadDate: now},
		events.NotificationDeleted{NotificationID: "c"})

	if _, err := in.Pending("c"); commands.ErrorCode(err) != commands.ENotFound {
		t.Fatalf("deleted notification: %v", err)
	}
	if it, err := in.Pending("b"); err != nil || it.ReadDate == nil || !it.ReadDate.Equal(now) {
		t.Fatalf("read notification: %+v %v", it, err)
	}
	if got := fmt.Sprint(in.Unread()); got != "[a]" {
		t.Fatalf("unread %s", got)
	}
	apply(t, in, events.AllNotificationsRead{NotificationIDs: []string{"a"}, ReadDate: now}, events.NotificationUnread{NotificationID: "b"})
	if got := fmt.Sprint(in.Unread()); got != "[b]" {
		t.Fatalf("unread after read-all and unread: %s", got)
	}
	apply(t, in, events.AllNotificationsDeleted{NotificationIDs: in.IDs()})
	if len(in.Items) != 0 {
		t.Fatalf("after delete-all: %+v", in.Items)
	}
	var e *commands.Error
	if _, err := in.Pending("a"); !errors.As(err, &e) {
		t.Fatalf("not an application error: %v", err)
	}
}

func BenchmarkSendAtCap(b *testing.B) {
	in := NewInbox()
	for i := range MaxPending {
		apply(b, in, sent(fmt.Sprint(i)))
	}
	b.ResetTimer()
	for i := range b.N {
		apply(b, in, in.Send(sent(fmt.Sprint("n", i)))...)
	}
}
