package notifications

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
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

// id is the n-th test notification id.
func id(n int) string { return fmt.Sprintf("00000000-0000-7000-8000-%012d", n) }

func sent(n int) events.NotificationSent {
	return events.NotificationSent{NotificationID: id(n), RecipientID: "u"}
}

func TestSendOverflowDeletesOldest(t *testing.T) {
	in := NewInbox()
	for i := range MaxPending {
		apply(t, in, sent(i))
	}
	ps := in.Send(sent(MaxPending))
	if len(ps) != 2 {
		t.Fatalf("decided %d events, want send + one overflow deletion", len(ps))
	}
	del, ok := ps[0].(events.NotificationDeleted)
	if !ok || del.NotificationID != id(0) || del.Reason != events.ReasonOverflow {
		t.Fatalf("overflow decision %+v: want the deletion of the oldest first", ps[0])
	}
	if _, ok := ps[1].(events.NotificationSent); !ok {
		t.Fatalf("the send is not last: %+v", ps[1])
	}
	apply(t, in, ps...)
	if in.Len() != MaxPending || in.items[0].id.String() != id(1) || in.items[MaxPending-1].id.String() != id(MaxPending) {
		t.Fatalf("after overflow: %d items, oldest %s, newest %s", in.Len(), in.items[0].id, in.items[in.Len()-1].id)
	}
}

// TestInboxDecisions decides each command against one inbox state: a and b
// pending (b read at then), c deleted.
func TestInboxDecisions(t *testing.T) {
	then := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	now := then.Add(time.Hour)
	state := func(t *testing.T) *Inbox {
		in := NewInbox()
		apply(t, in, sent(1), sent(2), sent(3),
			events.NotificationRead{NotificationID: id(2), ReadDate: then},
			events.NotificationDeleted{NotificationID: id(3)})
		return in
	}
	upper := strings.ToUpper(id(1))
	tests := []struct {
		name    string
		decide  func(*Inbox) ([]events.Payload, error)
		want    []events.Payload
		wantErr string // an application error code
	}{
		{"delete pending", func(in *Inbox) ([]events.Payload, error) { return in.Delete("u", id(1)) },
			[]events.Payload{events.NotificationDeleted{NotificationID: id(1), RecipientID: "u", Reason: events.ReasonUser}}, ""},
		{"delete names the canonical id", func(in *Inbox) ([]events.Payload, error) { return in.Delete("u", upper) },
			[]events.Payload{events.NotificationDeleted{NotificationID: id(1), RecipientID: "u", Reason: events.ReasonUser}}, ""},
		{"delete deleted", func(in *Inbox) ([]events.Payload, error) { return in.Delete("u", id(3)) }, nil, commands.ENotFound},
		{"delete unknown", func(in *Inbox) ([]events.Payload, error) { return in.Delete("u", id(9)) }, nil, commands.ENotFound},
		{"delete not a uuid", func(in *Inbox) ([]events.Payload, error) { return in.Delete("u", "x") }, nil, commands.ENotFound},
		{"mark read unread", func(in *Inbox) ([]events.Payload, error) {
			_, ps, err := in.MarkRead("u", id(1), now)
			return ps, err
		}, []events.Payload{events.NotificationRead{NotificationID: id(1), RecipientID: "u", ReadDate: now}}, ""},
		{"mark read read", func(in *Inbox) ([]events.Payload, error) {
			_, ps, err := in.MarkRead("u", id(2), now)
			return ps, err
		}, nil, ""},
		{"mark read deleted", func(in *Inbox) ([]events.Payload, error) {
			_, ps, err := in.MarkRead("u", id(3), now)
			return ps, err
		}, nil, commands.ENotFound},
		{"mark unread read", func(in *Inbox) ([]events.Payload, error) { return in.MarkUnread("u", id(2)) },
			[]events.Payload{events.NotificationUnread{NotificationID: id(2), RecipientID: "u"}}, ""},
		{"mark unread unread", func(in *Inbox) ([]events.Payload, error) { return in.MarkUnread("u", id(1)) }, nil, ""},
		{"mark unread unknown", func(in *Inbox) ([]events.Payload, error) { return in.MarkUnread("u", id(9)) }, nil, commands.ENotFound},
		{"mark all read", func(in *Inbox) ([]events.Payload, error) {
			_, ps := in.MarkAllRead("u", now)
			return ps, nil
		},
			[]events.Payload{events.AllNotificationsRead{RecipientID: "u", NotificationIDs: []string{id(1)}, ReadDate: now}}, ""},
		{"delete all", func(in *Inbox) ([]events.Payload, error) { return in.DeleteAll("u"), nil },
			[]events.Payload{events.AllNotificationsDeleted{RecipientID: "u", NotificationIDs: []string{id(1), id(2)}, Reason: events.ReasonBulk}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.decide(state(t))
			if tt.wantErr != "" {
				var e *commands.Error
				if !errors.As(err, &e) || e.Code != tt.wantErr {
					t.Fatalf("error %v, want code %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("decided\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestMarkReadAgainKeepsFirstDate(t *testing.T) {
	then := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	in := NewInbox()
	apply(t, in, sent(1), events.NotificationRead{NotificationID: id(1), ReadDate: then})
	at, ps, err := in.MarkRead("u", id(1), then.Add(time.Hour))
	if err != nil || len(ps) != 0 || !at.Equal(then) {
		t.Fatalf("read again: %v %v %v, want the first date and no event", at, ps, err)
	}
}

// TestMarkAllReadAgainKeepsTheDate: with nothing unread, marking all read
// decides nothing and answers when they were read, as MarkRead does for
// one, not a time no notification was read at.
func TestMarkAllReadAgainKeepsTheDate(t *testing.T) {
	then := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	in := NewInbox()
	apply(t, in, sent(1), sent(2), events.NotificationRead{NotificationID: id(1), ReadDate: then.Add(-time.Hour)},
		events.AllNotificationsRead{NotificationIDs: []string{id(2)}, ReadDate: then})
	at, ps := in.MarkAllRead("u", then.Add(time.Hour))
	if len(ps) != 0 || !at.Equal(then) {
		t.Fatalf("mark all read again: %v %+v, want %v and no event", at, ps, then)
	}
	now := then.Add(2 * time.Hour)
	if at, _ := NewInbox().MarkAllRead("u", now); !at.Equal(now) {
		t.Fatalf("mark all read of an empty inbox answered %v, want now", at)
	}
}

func TestEmptyInboxBulkDecidesNothing(t *testing.T) {
	in := NewInbox()
	if _, ps := in.MarkAllRead("u", time.Now()); ps != nil {
		t.Fatalf("mark all read on nothing: %+v", ps)
	}
	if ps := in.DeleteAll("u"); ps != nil {
		t.Fatalf("delete all on nothing: %+v", ps)
	}
}

func TestInboxAppliesBulkEvents(t *testing.T) {
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	in := NewInbox()
	apply(t, in, sent(1), sent(2))
	apply(t, in, events.AllNotificationsRead{NotificationIDs: []string{id(1)}, ReadDate: now}, events.NotificationUnread{NotificationID: id(2)})
	if in.Unread() != 1 || in.items[0].read != now.UnixMicro() {
		t.Fatalf("after read-all of 1: %+v", in.items)
	}
	apply(t, in, events.AllNotificationsDeleted{NotificationIDs: []string{id(1), id(2)}})
	if in.Len() != 0 {
		t.Fatalf("after delete-all: %+v", in.items)
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	in := NewInbox()
	apply(t, in, sent(1), sent(2), events.NotificationRead{NotificationID: id(2), ReadDate: time.UnixMicro(1_800_000_000_000_123)})
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	back := NewInbox()
	if err := json.Unmarshal(b, back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in.items, back.items) {
		t.Fatalf("snapshot round trip: %+v, want %+v", back.items, in.items)
	}
	if err := json.Unmarshal([]byte(`{"items":"AAAA"}`), NewInbox()); err == nil {
		t.Fatal("a truncated snapshot decoded")
	}
}

func TestApplyRefusesANonUUID(t *testing.T) {
	e, _ := events.New("id", events.Meta{WorkspaceID: "w", Time: time.Now()}, events.Aggregate{Kind: events.KindInbox, ID: "u"},
		events.NotificationSent{NotificationID: "not-a-uuid", RecipientID: "u"})
	if err := NewInbox().Apply(e); err == nil {
		t.Fatal("a send of a non-UUID id was applied")
	}
}

func BenchmarkSendAtCap(b *testing.B) {
	in := NewInbox()
	for i := range MaxPending {
		apply(b, in, sent(i))
	}
	b.ResetTimer()
	for i := range b.N {
		apply(b, in, in.Send(sent(MaxPending+i))...)
	}
}

// BenchmarkInboxMemory reports the bytes an inbox of 100 notifications
// holds, the shape of the memory floor (10,000 users with 100 each).
func BenchmarkInboxMemory(b *testing.B) {
	b.ReportAllocs()
	for range b.N {
		in := NewInbox()
		for i := range 100 {
			apply(b, in, sent(i))
		}
		b.ReportMetric(float64(cap(in.items)*recordSize), "bytes/inbox")
	}
}
