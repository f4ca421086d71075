package notifications

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"astro/commands"
	"astro/events"
	"astro/events/natstest"
)

// noneDue is a schedule's source with no inbox due; it says when a round
// first asked.
type noneDue struct{ asked chan struct{} }

func (d noneDue) Due(context.Context, int, time.Time, bool, int) ([]DueInbox, error) {
	select {
	case <-d.asked:
	default:
		close(d.asked)
	}
	return nil, nil
}

// An erasure that its request's deadline cut short after its event, while
// the service runs on, is finished by the compactor's next rounds once it
// is abandoned; it waited for the next start.
func TestRunFinishesAnErasureCutShortWhileItRuns(t *testing.T) {
	f := newLogFixture(t, 0)
	for i := range 20 {
		f.send(t, "alice", fmt.Sprintf("ERASE-ME-%d", i))
	}
	running, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	due := noneDue{asked: make(chan struct{})}
	go func() {
		done <- f.compactor.Run(running, due, Schedule{Poll: 20 * time.Millisecond, Abandoned: 50 * time.Millisecond})
	}()
	t.Cleanup(func() { stop(); <-done })
	<-due.asked // past the start's pass, which finishes every erasure begun

	f.eraseCutShort(t, "alice")

	deadlineAt := time.Now().Add(10 * time.Second)
	for {
		evs := f.history(t, "alice")
		left, err := f.log.ErasureLedger().Unfinished(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 1 && evs[0].Type == (events.InboxErased{}).EventType() && len(left) == 0 {
			return
		}
		if time.Now().After(deadlineAt) {
			t.Fatalf("the erasure cut short was not finished: %d events left, ledger %v", len(evs), left)
		}
		time.Sleep(20 * time.Millisecond) // polling, bounded by the deadline
	}
}

// idleDue lists the inboxes the test compacted when the round asks for
// the idle ones, as the read model would once their compactions are
// older than the bound, and records what it was asked.
type idleDue struct {
	inboxes []string
	asked   []bool // idle, each time
}

func (d *idleDue) Due(_ context.Context, _ int, _ time.Time, idle bool, _ int) ([]DueInbox, error) {
	d.asked = append(d.asked, idle)
	if !idle {
		return nil, nil
	}
	var out []DueInbox
	for _, u := range d.inboxes {
		out = append(out, DueInbox{WorkspaceID: "w1", RecipientID: u})
	}
	return out, nil
}

// On a busy log compaction purges, and what it removes leaves the files
// when JetStream drops its block, which it does once nothing in it is
// live (or rewrites, once more than half is removed). Bob's deleted
// notification, purged, sits in a block that other inboxes' compactions
// keep mostly live; those inboxes are idle since. A round compacts them
// again, once their compactions are half the bound old, and the block,
// with bob's notification, goes; before, only inboxes with events since
// their compaction were due, and the block stayed for good (JetStream's
// sync, every 2 minutes, rewrites only a block more than half removed).
// On a quiet log, where compactions overwrite, an idle inbox is not due.
func TestIdleInboxesAreCompactedAgainOnABusyLog(t *testing.T) {
	f := newLogFixture(t, 0)
	ctx := t.Context()
	quiet := &idleDue{}
	f.compactor.round(ctx, quiet, Schedule{Every: 1000, Batch: 1000}) // a young log: overwrite
	if !slices.Equal(quiet.asked, []bool{false}) {
		t.Fatalf("on a quiet log the round asked for idle inboxes: %v", quiet.asked)
	}

	comp, err := NewCompactor(f.store, f.log, &quickTurnover{Log: f.log}, f.log.ErasureLedger(), time.Now, CompactorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	compact := func(user string) {
		t.Helper()
		res, err := comp.Compact(ctx, "w1", user)
		if err != nil {
			t.Fatal(err)
		}
		if res.Overwrote {
			t.Fatal("want the turnover mode")
		}
	}
	p := newPublisher(t, f)
	pub := func(user string, n int) []string {
		t.Helper()
		var ids []string
		for i := range n {
			s := p.sent(user, i)
			s.Message = strings.Repeat("x", 10<<10)
			p.publish(t, user, s)
			ids = append(ids, s.NotificationID)
		}
		<-p.js.PublishAsyncComplete()
		return ids
	}
	blocks := func() int {
		t.Helper()
		files, err := filepath.Glob(filepath.Join(f.dir, "jetstream", "*", "streams", f.inbox.CachedInfo().Config.Name, "msgs", "*.blk"))
		if err != nil {
			t.Fatal(err)
		}
		return len(files)
	}
	// fill sends to user and deletes it all until the log has begun
	// another block: the one being written is closed.
	fill := func(user string) {
		t.Helper()
		for start := blocks(); blocks() == start; {
			ids := pub(user, 20)
			p.publish(t, user, events.AllNotificationsDeleted{RecipientID: user, NotificationIDs: ids, Reason: events.ReasonBulk})
			<-p.js.PublishAsyncComplete()
		}
	}
	pub("alice", 300)
	pub("dave", 300)
	fill("f1")
	for _, u := range []string{"alice", "dave", "f1"} {
		compact(u)
	}
	secret := "SECRET-" + events.NewID(time.Now())
	sent, _, err := f.handlers.Send.Handle(ctx, Send{Caller: sender, RecipientID: "bob", SenderID: "0000b0b0-0000-4000-8000-000000000001",
		NotificationType: "t", Subject: secret, Message: secret})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.handlers.Delete.Handle(ctx, Delete{Caller: commands.Caller{WorkspaceID: "w1", UserID: "bob"}, NotificationID: sent.NotificationID}); err != nil {
		t.Fatal(err)
	}
	compact("bob")
	fill("f2") // closes the block bob's notification is in
	compact("f2")
	if len(natstest.FilesWith(t, f.dir, secret)) == 0 {
		t.Fatal("bob's deleted notification is in no file before the idle inboxes are compacted again: the search finds nothing")
	}

	busy := &idleDue{inboxes: []string{"alice", "dave", "f1", "bob", "f2"}}
	comp.round(ctx, busy, Schedule{Every: 1000, Batch: 1000})
	if !slices.Equal(busy.asked, []bool{true}) {
		t.Fatalf("on a busy log the round did not ask for idle inboxes: %v", busy.asked)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		found := natstest.FilesWith(t, f.dir, secret)
		if len(found) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("bob's deleted notification is still in %v after the idle inboxes were compacted again", found)
		}
		time.Sleep(50 * time.Millisecond) // polling, bounded by the deadline
	}
}
