package notifications

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"astro/commands"
	"astro/events"
	"astro/events/natslog"
	"astro/events/natsserver"
	"astro/events/natstest"
)

// A send under an Idempotency-Key whose first attempt got only its
// overflow delete into the log, retried after another send filled the
// inbox again, must still keep the cap: its decision deletes another
// notification, which is not the first attempt's delete.
func TestRetriedSendKeepsTheCap(t *testing.T) {
	f := newLogFixture(t, 0)
	ctx := t.Context()
	for i := range MaxPending {
		f.send(t, "alice", fmt.Sprintf("n%d", i))
	}
	keyed := sender
	keyed.IdempotencyKey = "k-1"
	subject := events.Subject("w1", events.Aggregate{Kind: events.KindInbox, ID: "alice"})

	// The first attempt: decided on the full inbox, only its delete of the
	// oldest reached the log before it stopped.
	var first []events.Payload
	if err := f.store.Load(ctx, subject, func(in *Inbox, _ uint64) error {
		first = in.Send(events.NotificationSent{NotificationID: events.NameID("w1", "svc", "k-1", "notification"), RecipientID: "alice"})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(first) != 2 {
		t.Fatalf("a send on a full inbox decides %d events, want a delete and the send", len(first))
	}
	evs, err := commands.NewEvents(keyed, time.Now(), events.Aggregate{Kind: events.KindInbox, ID: "alice"}, first[0])
	if err != nil {
		t.Fatal(err)
	}
	last, err := f.log.LastSeq(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.log.Append(ctx, subject, last, evs[0]); err != nil {
		t.Fatal(err)
	}
	// Another send fills the inbox again.
	f.send(t, "alice", "other")
	// The retry.
	if _, _, err := f.handlers.Send.Handle(ctx, Send{Caller: keyed, RecipientID: "alice", SenderID: "0000b0b0-0000-4000-8000-000000000001",
		NotificationType: "task.assigned", Subject: "s", Message: "retried"}); err != nil {
		t.Fatal(err)
	}
	if got := len(fold(t, f.history(t, "alice"))); got > MaxPending {
		t.Fatalf("after the retry the log holds %d pending notifications, over the cap of %d", got, MaxPending)
	}
}

// A send under an Idempotency-Key that got through, then retried (its
// answer lost, Caller.Again) after its notification was deleted and the
// inbox filled to the cap, delivered already: its decision, on the full
// inbox, would delete the oldest notification to make room, which the
// request never asked for.
func TestRetriedSendThatGotThroughDeletesNothing(t *testing.T) {
	f := newLogFixture(t, 0)
	ctx := t.Context()
	for i := range MaxPending - 1 {
		f.send(t, "alice", fmt.Sprintf("n%d", i))
	}
	keyed := sender
	keyed.IdempotencyKey = "k-1"
	send := func(c commands.Caller) events.NotificationSent {
		t.Helper()
		sent, _, err := f.handlers.Send.Handle(ctx, Send{Caller: c, RecipientID: "alice", SenderID: "0000b0b0-0000-4000-8000-000000000001",
			NotificationType: "task.assigned", Subject: "s", Message: "keyed"})
		if err != nil {
			t.Fatal(err)
		}
		return sent
	}
	x := send(keyed)
	alice := commands.Caller{WorkspaceID: "w1", UserID: "alice"}
	if _, err := f.handlers.Delete.Handle(ctx, Delete{Caller: alice, NotificationID: x.NotificationID}); err != nil {
		t.Fatal(err)
	}
	f.send(t, "alice", "fills the inbox")
	before := len(f.history(t, "alice"))

	again := keyed
	again.Again = true
	send(again)
	if after := f.history(t, "alice"); len(after) != before {
		t.Fatalf("the retry appended %s; want nothing, its send got through before", after[len(after)-1].Type)
	}
	if got := len(f.state(t, "alice")); got != MaxPending {
		t.Fatalf("%d pending after the retry, want %d", got, MaxPending)
	}
}

// With an fsync after each append (ASTRO_LOG_SYNC=always), a request whose
// append got into the log but whose fsync failed answers an error; doing
// it again finds the event there and appends nothing. That second answer
// may not say done while the event may still be lost: it waits for an
// fsync of its own, and fails with it. Once one has covered the event, a
// repeat waits for none.
func TestRepeatAfterAFailedSyncIsNotAnsweredUnsynced(t *testing.T) {
	srv := natstest.ServerWith(t, natsserver.Config{SyncAlways: true})
	var failing atomic.Bool
	var syncs atomic.Int32
	l, err := natslog.Open(t.Context(), natstest.ConnTo(t, srv), natslog.Config{Sync: func(ctx context.Context) error {
		syncs.Add(1)
		if failing.Load() {
			return errors.New("EIO")
		}
		return srv.Sync(ctx)
	}})
	if err != nil {
		t.Fatal(err)
	}
	store, err := commands.NewStore(l, l.Snapshots(), NewInbox, commands.StoreConfig{Name: SnapshotName})
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHandlers(store, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	keyed := sender
	keyed.IdempotencyKey = "k-1"
	send := Send{Caller: keyed, RecipientID: "alice", SenderID: "0000b0b0-0000-4000-8000-000000000001", NotificationType: "t", Subject: "s", Message: "m"}
	alice := commands.Caller{WorkspaceID: "w1", UserID: "alice"}
	var sent events.NotificationSent
	for _, c := range []struct {
		name string
		do   func(again bool) error
	}{
		{"send retried under its key", func(again bool) error {
			send.Caller.Again = again
			var err error
			sent, _, err = h.Send.Handle(t.Context(), send)
			return err
		}},
		{"mark read again", func(bool) error {
			_, _, err := h.MarkRead.Handle(t.Context(), MarkRead{Caller: alice, NotificationID: sent.NotificationID})
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			failing.Store(true)
			if err := c.do(false); commands.ErrorCode(err) != commands.EUnavailable {
				t.Fatalf("with the fsync failing: %v, want unavailable", err)
			}
			if err := c.do(true); commands.ErrorCode(err) != commands.EUnavailable {
				t.Fatalf("again, the fsync still failing: %v, want unavailable", err)
			}
			failing.Store(false)
			if err := c.do(true); err != nil {
				t.Fatalf("again, the fsync working: %v", err)
			}
			// Once an fsync has covered the event, doing it again waits
			// for none.
			syncs.Store(0)
			if err := c.do(true); err != nil || syncs.Load() != 0 {
				t.Fatalf("once more: %v, with %d fsyncs, want none", err, syncs.Load())
			}
		})
	}
}

// A delete under an Idempotency-Key that went through, retried because its
// answer was lost (Caller.Again): the notification is gone because of this
// very request, so the retry answers as the first attempt did, not 404;
// a retry under another key, or a delete of what was never there, is 404.
func TestRetriedDeleteThatGotThroughIsNotNotFound(t *testing.T) {
	f := newLogFixture(t, 0)
	ctx := t.Context()
	id := f.send(t, "alice", "m")
	alice := commands.Caller{WorkspaceID: "w1", UserID: "alice", IdempotencyKey: "del-1"}
	first, err := f.handlers.Delete.Handle(ctx, Delete{Caller: alice, NotificationID: id})
	if err != nil {
		t.Fatal(err)
	}
	retry := alice
	retry.Again = true
	// An upper-case spelling of the id names the same notification.
	again, err := f.handlers.Delete.Handle(ctx, Delete{Caller: retry, NotificationID: strings.ToUpper(id)})
	if err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if again.Seq != first.Seq || len(again.Events) != 0 {
		t.Fatalf("the retry answered position %d with %d events appended, want the first attempt's %d and none", again.Seq, len(again.Events), first.Seq)
	}
	other := retry
	other.IdempotencyKey = "del-2"
	for _, c := range []struct {
		name   string
		caller commands.Caller
		id     string
	}{
		{"another request's retry", other, id},
		{"never there", retry, "00000000-0000-4000-8000-0000000000ff"},
	} {
		if _, err := f.handlers.Delete.Handle(ctx, Delete{Caller: c.caller, NotificationID: c.id}); commands.ErrorCode(err) != commands.ENotFound {
			t.Errorf("%s: %v, want not found", c.name, err)
		}
	}
}

// dupAfterOther is a log whose first overflow delete is stored, then
// another instance writes to the same inbox, then the append answers
// "duplicate": what a replicated (R3) stream answers a publish retried after
// its ack was lost (nats-server checks Nats-Msg-Id before the expected
// subject sequence on clustered streams).
type dupAfterOther struct {
	*natslog.Log
	done  atomic.Bool
	other func()
}

func (l *dupAfterOther) Append(ctx context.Context, subject string, expected uint64, e events.Event) (uint64, error) {
	seq, err := l.Log.Append(ctx, subject, expected, e)
	if err == nil && e.Type == (events.NotificationDeleted{}).EventType() && l.done.CompareAndSwap(false, true) {
		l.other()
		return seq, fmt.Errorf("append to %s: %w", subject, events.ErrAlreadyAppended)
	}
	return seq, err
}

// A send to a full inbox whose overflow delete got in, but was answered
// "duplicate" after another instance's send to the same inbox (its ack
// lost, then retried), decides the rest again: the cap holds.
func TestDuplicateAfterAnotherWriterKeepsTheCap(t *testing.T) {
	f := newLogFixture(t, 0)
	ctx := t.Context()
	for i := range MaxPending {
		f.send(t, "alice", fmt.Sprintf("n%d", i))
	}
	wl := &dupAfterOther{Log: f.log}
	storeA, err := commands.NewStore(wl, f.log.Snapshots(), NewInbox, commands.StoreConfig{Name: SnapshotName})
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewHandlers(storeA, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	wl.other = func() { f.send(t, "alice", "sent on instance B meanwhile") }
	if _, _, err := a.Send.Handle(ctx, Send{Caller: sender, RecipientID: "alice", SenderID: "0000b0b0-0000-4000-8000-000000000001",
		NotificationType: "task.assigned", Subject: "s", Message: "sent on instance A"}); err != nil {
		t.Fatal(err)
	}
	if got := len(fold(t, f.history(t, "alice"))); got > MaxPending {
		t.Fatalf("the log holds %d pending notifications for alice, over the cap of %d", got, MaxPending)
	}
}
