package notifications

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"astro/commands"
	"astro/events"
	"astro/events/natslog"
	"astro/events/natsserver"
	"astro/events/natstest"
)

// logFixture is an inbox store on a real JetStream log, whose files are
// in dir.
type logFixture struct {
	dir       string
	log       *natslog.Log
	inbox     jetstream.Stream // the inbox stream, for its size
	store     *Inboxes
	handlers  *Handlers
	compactor *Compactor
}

func newLogFixture(t testing.TB, partBytes int) *logFixture {
	t.Helper()
	dir := t.TempDir()
	nc := natstest.ConnTo(t, natstest.ServerWith(t, natsserver.Config{StoreDir: dir}))
	l, err := natslog.Open(t.Context(), nc, natslog.Config{})
	if err != nil {
		t.Fatal(err)
	}
	f := &logFixture{dir: dir, log: l}
	if f.inbox, err = l.JetStream().Stream(t.Context(), l.Stream(events.KindInbox)); err != nil {
		t.Fatal(err)
	}
	if f.store, err = commands.NewStore(l, l.Snapshots(), NewInbox, commands.StoreConfig{Name: SnapshotName}); err != nil {
		t.Fatal(err)
	}
	if f.handlers, err = NewHandlers(f.store, time.Now); err != nil {
		t.Fatal(err)
	}
	if f.compactor, err = NewCompactor(f.store, l, l, l.Pending(), time.Now, CompactorConfig{PartBytes: partBytes}); err != nil {
		t.Fatal(err)
	}
	return f
}

var sender = commands.Caller{WorkspaceID: "w1", UserID: "svc", Scopes: []string{ScopeSend}}

func (f *logFixture) send(t testing.TB, recipient, message string) string {
	t.Helper()
	sent, _, err := f.handlers.Send.Handle(t.Context(), Send{Caller: sender, RecipientID: recipient, SenderID: "0000b0b0-0000-4000-8000-000000000001",
		NotificationType: "task.assigned", Subject: "s", Message: message, Data: []byte(`{"taskId":"00000000-0000-4000-8000-000000000042"}`)})
	if err != nil {
		t.Fatal(err)
	}
	return sent.NotificationID
}

// state is the inbox of recipient as the store holds it.
func (f *logFixture) state(t testing.TB, recipient string) []item {
	t.Helper()
	var out []item
	err := f.store.Load(t.Context(), events.Subject("w1", events.Aggregate{Kind: events.KindInbox, ID: recipient}), func(in *Inbox, _ uint64) error {
		out = append([]item(nil), in.items...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// history is every event the log holds for recipient's inbox.
func (f *logFixture) history(t testing.TB, recipient string) []events.Event {
	t.Helper()
	var out []events.Event
	if _, err := f.log.Read(t.Context(), events.Subject("w1", events.Aggregate{Kind: events.KindInbox, ID: recipient}), 0, func(e events.Event) error {
		out = append(out, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// fold rebuilds an inbox from evs alone.
func fold(t testing.TB, evs []events.Event) []item {
	t.Helper()
	in := NewInbox()
	for _, e := range evs {
		if err := in.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	return in.items
}

func TestCompactionRestatesTheInboxAndErasesWhatWasDeleted(t *testing.T) {
	f := newLogFixture(t, 2<<10) // small parts: a compaction of several events
	ctx := t.Context()
	ids := make([]string, 30)
	for i := range ids {
		ids[i] = f.send(t, "alice", fmt.Sprintf("message %d", i))
	}
	gone := f.send(t, "alice", "DELETED-CONTENT-7f3a")
	kept := f.send(t, "alice", "KEPT-CONTENT-91bc")
	alice := commands.Caller{WorkspaceID: "w1", UserID: "alice"}
	for _, id := range ids[:10] {
		if _, err := f.handlers.Delete.Handle(ctx, Delete{Caller: alice, NotificationID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.handlers.Delete.Handle(ctx, Delete{Caller: alice, NotificationID: gone}); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids[20:25] {
		if _, _, err := f.handlers.MarkRead.Handle(ctx, MarkRead{Caller: alice, NotificationID: id}); err != nil {
			t.Fatal(err)
		}
	}
	f.send(t, "bob", "bob's own") // another inbox, untouched
	before := f.state(t, "alice")
	bobBefore := f.history(t, "bob")

	res, err := f.compactor.Compact(ctx, "w1", "alice")
	if err != nil {
		t.Fatal(err)
	}
	if res.Pending != 21 || res.Parts < 2 || res.Erased != 32+11+5 {
		t.Fatalf("compaction: %+v, want 21 pending in several parts, 48 events erased", res)
	}

	// The log holds the compaction alone, and it rebuilds the inbox.
	evs := f.history(t, "alice")
	if len(evs) != res.Parts || evs[0].Seq != res.Seq {
		t.Fatalf("the log holds %d events of alice from %d, want the %d parts from %d", len(evs), evs[0].Seq, res.Parts, res.Seq)
	}
	for _, e := range evs {
		if e.Type != (events.InboxCompacted{}).EventType() {
			t.Fatalf("left in the log: %s", e.Type)
		}
	}
	if got := fold(t, evs); !reflect.DeepEqual(got, before) {
		t.Fatalf("the compacted log rebuilds\n%v\nwant\n%v", got, before)
	}
	if got := f.state(t, "alice"); !reflect.DeepEqual(got, before) {
		t.Fatalf("the store's inbox after compaction\n%v\nwant\n%v", got, before)
	}
	// And a store that never saw the history loads the same.
	cold, err := commands.NewStore(f.log, f.log.Snapshots(), NewInbox, commands.StoreConfig{Name: SnapshotName})
	if err != nil {
		t.Fatal(err)
	}
	var coldItems []item
	if err := cold.Load(ctx, events.Subject("w1", events.Aggregate{Kind: events.KindInbox, ID: "alice"}), func(in *Inbox, _ uint64) error {
		coldItems = in.items
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(coldItems, before) {
		t.Fatalf("a cold load after compaction\n%v\nwant\n%v", coldItems, before)
	}
	if got := f.history(t, "bob"); !reflect.DeepEqual(got, bobBefore) {
		t.Fatalf("bob's inbox changed: %d events, want %d", len(got), len(bobBefore))
	}

	// The deleted notification's content is gone from the files; the
	// pending one's is there, in the compaction.
	if found := natstest.FilesWith(t, f.dir, "DELETED-CONTENT-7f3a"); len(found) > 0 {
		t.Fatalf("a deleted notification's content is still in %v", found)
	}
	if found := natstest.FilesWith(t, f.dir, "KEPT-CONTENT-91bc"); len(found) == 0 {
		t.Fatal("a pending notification's content is in no file: the test's search finds nothing")
	}

	// Commands go on from the compacted state, and the next compaction
	// replaces this one.
	if _, err := f.handlers.Delete.Handle(ctx, Delete{Caller: alice, NotificationID: kept}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.compactor.Compact(ctx, "w1", "alice"); err != nil {
		t.Fatal(err)
	}
	if found := natstest.FilesWith(t, f.dir, "KEPT-CONTENT-91bc"); len(found) > 0 {
		t.Fatalf("a notification deleted after a compaction that carried it is still in %v", found)
	}
	if got, want := len(f.state(t, "alice")), 20; got != want {
		t.Fatalf("%d pending, want %d", got, want)
	}
}

// afterAppend is a log that calls after once an event has been appended.
type afterAppend struct {
	*natslog.Log
	after func(events.Event)
}

func (l afterAppend) Append(ctx context.Context, subject string, expected uint64, e events.Event) (uint64, error) {
	seq, err := l.Log.Append(ctx, subject, expected, e)
	if err == nil {
		l.after(e)
	}
	return seq, err
}

// Another instance deletes a notification between two parts of a
// compaction: the compaction is decided again, and its first part, left
// behind, is no part of it. The compaction cut at that part and counted it
// in its receipt.
func TestCompactionAfterARaceBetweenItsParts(t *testing.T) {
	f := newLogFixture(t, 2<<10) // small parts: a compaction of several events
	ctx := t.Context()
	var ids []string
	for i := range 30 {
		ids = append(ids, f.send(t, "alice", fmt.Sprintf("message %d", i)))
	}
	raced := false
	racing := afterAppend{Log: f.log, after: func(e events.Event) {
		if raced || e.Type != "InboxCompacted" {
			return
		}
		raced = true
		if _, err := f.handlers.Delete.Handle(ctx, Delete{Caller: commands.Caller{WorkspaceID: "w1", UserID: "alice"}, NotificationID: ids[29]}); err != nil {
			t.Error(err)
		}
	}}
	store, err := commands.NewStore(racing, f.log.Snapshots(), NewInbox, commands.StoreConfig{Name: SnapshotName})
	if err != nil {
		t.Fatal(err)
	}
	comp, err := NewCompactor(store, racing, f.log, f.log.Pending(), time.Now, CompactorConfig{PartBytes: 2 << 10})
	if err != nil {
		t.Fatal(err)
	}
	res, err := comp.Compact(ctx, "w1", "alice")
	if err != nil {
		t.Fatal(err)
	}
	if !raced {
		t.Fatal("no race: the test did not delete between two parts")
	}

	left := f.history(t, "alice")
	compactions := map[string]int{}
	for _, e := range left {
		p, err := events.Decode(e)
		if err != nil {
			t.Fatal(err)
		}
		c, ok := p.(*events.InboxCompacted)
		if !ok {
			t.Fatalf("the log still holds a %s before the compaction", e.Type)
		}
		compactions[c.CompactionID]++
	}
	if len(compactions) != 1 || len(left) != res.Parts || left[0].Seq != res.Seq || res.Pending != 29 {
		t.Fatalf("receipt %+v, log left: %d events of %d compactions from %d; want one compaction of 29 pending, cut at its first part",
			res, len(left), len(compactions), left[0].Seq)
	}
	if got := fold(t, left); len(got) != 29 {
		t.Fatalf("the log left rebuilds %d pending, want 29", len(got))
	}
}

// A retried erasure (same Idempotency-Key) whose first attempt appended
// its event, then failed before answering, cuts at that event: not at the
// inbox's last event, which may be a notification sent since.
func TestRetriedErasureCutsAtItsOwnEvent(t *testing.T) {
	f := newLogFixture(t, 0)
	ctx := t.Context()
	f.send(t, "alice", "before")
	admin := commands.Caller{WorkspaceID: "w1", UserID: "dpo", IdempotencyKey: "erase-alice-1"}
	first, err := f.compactor.Erase(ctx, admin, "alice")
	if err != nil {
		t.Fatal(err)
	}
	f.send(t, "alice", "after 1")
	f.send(t, "alice", "after 2")

	admin.Again = true
	again, err := f.compactor.Erase(ctx, admin, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if again.ErasureID != first.ErasureID || again.Seq != first.Seq || again.Notifications != first.Notifications {
		t.Errorf("the retry's receipt %+v, want the first one's %+v", again, first)
	}
	var got []string
	for _, e := range f.history(t, "alice") {
		got = append(got, e.Type)
	}
	if want := []string{"InboxErased", "NotificationSent", "NotificationSent"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after the retried erasure the log holds %v, want %v: the erasure and what was sent after it", got, want)
	}
}

func TestErasureLeavesOneEventAndNoContent(t *testing.T) {
	f := newLogFixture(t, 0)
	ctx := t.Context()
	for i := range 5 {
		f.send(t, "alice", fmt.Sprintf("ERASE-ME-%d-c41d", i))
	}
	if _, err := f.compactor.Compact(ctx, "w1", "alice"); err != nil {
		t.Fatal(err)
	}
	f.send(t, "alice", "ERASE-ME-late-c41d")
	admin := commands.Caller{WorkspaceID: "w1", UserID: "dpo"}
	res, err := f.compactor.Erase(ctx, admin, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if res.Notifications != 6 || res.Events != 2 {
		t.Fatalf("erasure: %+v, want 6 notifications in 2 events", res)
	}
	evs := f.history(t, "alice")
	if len(evs) != 1 || evs[0].Type != (events.InboxErased{}).EventType() || evs[0].ActorID != "dpo" {
		t.Fatalf("after the erasure the log holds %+v, want one InboxErased by dpo", evs)
	}
	if got := f.state(t, "alice"); len(got) != 0 {
		t.Fatalf("erased inbox holds %v", got)
	}
	if found := natstest.FilesWith(t, f.dir, "c41d"); len(found) > 0 {
		t.Fatalf("erased content is still in %v", found)
	}
	// The inbox lives on.
	f.send(t, "alice", "after")
	if got := f.state(t, "alice"); len(got) != 1 {
		t.Fatalf("after the erasure, a send: %d pending, want 1", len(got))
	}
}

// A stop between a compaction's append and its erasure leaves the ledger
// entry; FinishAll does the rest. A compaction whose parts did not all
// land is done again: its first part restarted the inbox's count of
// events, so an idle inbox would never be due again (it erased nothing,
// and left that to a next compaction that never came).
func TestFinishCompletesWhatAStopCutShort(t *testing.T) {
	f := newLogFixture(t, 1<<10)
	ctx := t.Context()
	for i := range 10 {
		f.send(t, "alice", fmt.Sprintf("note %d", i))
	}
	subject := events.Subject("w1", events.Aggregate{Kind: events.KindInbox, ID: "alice"})
	appendParts := func(keep int) { f.compactPartly(t, "alice", keep) }

	// Cut after the first part: compacted again, whole.
	whole := f.state(t, "alice")
	if err := f.log.Pending().Begin(ctx, subject); err != nil {
		t.Fatal(err)
	}
	appendParts(1)
	if err := f.compactor.FinishAll(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	compacted := f.history(t, "alice")
	compactions := map[string]bool{}
	for _, e := range compacted {
		p, _ := events.Decode(e)
		c, ok := p.(*events.InboxCompacted)
		if !ok {
			t.Fatalf("after finishing a compaction cut short, the log still holds a %s", e.Type)
		}
		compactions[c.CompactionID] = true
	}
	if len(compactions) != 1 || !reflect.DeepEqual(fold(t, compacted), whole) {
		t.Fatalf("after finishing a compaction cut short: %d compactions in the log, folding to another inbox", len(compactions))
	}
	if left, err := f.log.Pending().Unfinished(ctx); err != nil || len(left) != 0 {
		t.Fatalf("ledger after finishing: %v, %v", left, err)
	}

	// Cut after every part landed, before the erasure.
	before := f.state(t, "alice")
	if err := f.log.Pending().Begin(ctx, subject); err != nil {
		t.Fatal(err)
	}
	appendParts(1 << 20)
	if err := f.compactor.FinishAll(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	evs := f.history(t, "alice")
	if evs[0].Type != (events.InboxCompacted{}).EventType() || !reflect.DeepEqual(fold(t, evs), before) {
		t.Fatalf("after finishing, the log holds %d events from a %s, folding to another inbox", len(evs), evs[0].Type)
	}
	for _, e := range evs {
		if p, _ := events.Decode(e); p.(*events.InboxCompacted).Part == 1 && e.Seq != evs[0].Seq {
			t.Fatalf("an older compaction is left at %d", e.Seq)
		}
	}
	if left, err := f.log.Pending().Unfinished(ctx); err != nil || len(left) != 0 {
		t.Fatalf("ledger after finishing: %v, %v", left, err)
	}
}

// compactPartly appends the first keep parts of a compaction of user's
// inbox in parts of 1 KiB, as one cut short would (keep past the parts:
// all of them), without erasing anything.
func (f *logFixture) compactPartly(t *testing.T, user string, keep int) {
	t.Helper()
	ctx := t.Context()
	agg := events.Aggregate{Kind: events.KindInbox, ID: user}
	content, err := Delivered(ctx, f.log, events.Subject("w1", agg))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	_, err = commands.Run(ctx, f.store, commands.Caller{WorkspaceID: "w1", UserID: compactorActor}, agg, now, func(in *Inbox) ([]events.Payload, error) {
		ps, err := in.compaction(user, events.NewID(now), content, 1<<10)
		if len(ps) < 2 {
			t.Fatalf("want a compaction of several parts, got %d", len(ps))
		}
		return ps[:min(keep, len(ps))], err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// eraseCutShort erases user's inbox as a request whose deadline comes
// right after the erasure's event is appended: the rest is left undone.
func (f *logFixture) eraseCutShort(t *testing.T, user string) {
	t.Helper()
	request, deadline := context.WithCancel(t.Context())
	defer deadline()
	cutting := afterAppend{Log: f.log, after: func(e events.Event) {
		if e.Type == (events.InboxErased{}).EventType() {
			deadline()
		}
	}}
	store, err := commands.NewStore(cutting, f.log.Snapshots(), NewInbox, commands.StoreConfig{Name: SnapshotName})
	if err != nil {
		t.Fatal(err)
	}
	comp, err := NewCompactor(store, cutting, f.log, f.log.Pending(), time.Now, CompactorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := comp.Erase(request, commands.Caller{WorkspaceID: "w1", UserID: "dpo"}, user); err == nil {
		t.Fatal("the erasure was not cut short")
	}
}

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
		left, err := f.log.Pending().Unfinished(t.Context())
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

// quickTurnover is the log with a turnover short enough that a compaction
// leaves what it removes to it, and a record of what is erased how.
type quickTurnover struct {
	*natslog.Log
	erased []string // "before/overwrite" of each EraseBefore
}

func (q *quickTurnover) Turnover(context.Context, string) (time.Duration, error) {
	return time.Minute, nil
}

func (q *quickTurnover) EraseBefore(ctx context.Context, subject string, before uint64, overwrite bool) (int, error) {
	q.erased = append(q.erased, fmt.Sprintf("%d/%v", before, overwrite))
	return q.Log.EraseBefore(ctx, subject, before, overwrite)
}

// A user's erasure cut short after its event, then a compaction cut short
// after its first part: finishing compacts the inbox again, and what the
// erasure removes is overwritten, as the user asked, whatever the
// turnover lets the compaction leave.
func TestFinishingAfterAnErasureOverwritesWhatItErases(t *testing.T) {
	f := newLogFixture(t, 1<<10)
	ctx := t.Context()
	for i := range 10 {
		f.send(t, "alice", fmt.Sprintf("ERASE-ME-%d", i))
	}
	f.eraseCutShort(t, "alice")
	var erasedAt uint64
	for _, e := range f.history(t, "alice") {
		if e.Type == (events.InboxErased{}).EventType() {
			erasedAt = e.Seq
		}
	}
	for i := range 10 {
		f.send(t, "alice", fmt.Sprintf("kept %d", i))
	}
	f.compactPartly(t, "alice", 1) // cut short after its first part

	log := &quickTurnover{Log: f.log}
	finisher, err := NewCompactor(f.store, f.log, log, f.log.Pending(), time.Now, CompactorConfig{PartBytes: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := finisher.FinishAll(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(log.erased, fmt.Sprintf("%d/true", erasedAt)) {
		t.Fatalf("erased %v; want what precedes the erasure at %d overwritten", log.erased, erasedAt)
	}
}

// publisher puts inbox events in the log directly, without waiting for
// each append, as many senders at once would: far faster than commands,
// for histories of a size no test could send one by one.
type publisher struct {
	js   jetstream.JetStream
	meta events.Meta
}

func newPublisher(tb testing.TB, f *logFixture) *publisher {
	return &publisher{js: f.log.JetStream(), meta: events.Meta{WorkspaceID: "w1", ActorID: "svc", Time: time.Now().UTC()}}
}

func (p *publisher) sent(recipient string, i int) events.NotificationSent {
	return events.NotificationSent{NotificationID: events.NewID(time.Now()), RecipientID: recipient, SenderID: "0000b0b0-0000-4000-8000-000000000001",
		NotificationType: "task.assigned", Subject: fmt.Sprintf("Task %d assigned", i), Message: "Please review the attached task before Friday.",
		Data: []byte(`{"taskId":"00000000-0000-4000-8000-000000000042"}`), CreateDate: p.meta.Time}
}

func (p *publisher) publish(tb testing.TB, recipient string, pl events.Payload) {
	tb.Helper()
	e, err := events.New(events.NewID(time.Now()), p.meta, events.Aggregate{Kind: events.KindInbox, ID: recipient}, pl)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := p.js.PublishMsgAsync(natslog.Encode(e)); err != nil {
		tb.Fatal(err)
	}
}

// send publishes the i-th send to recipient as in decides it (the oldest
// deleted first when it is full) and returns the payloads.
func (p *publisher) send(tb testing.TB, in *Inbox, recipient string, i int) []events.Payload {
	tb.Helper()
	s := p.sent(recipient, i)
	decided := in.Send(s)
	// What folding them does, without decoding them again: the oldest
	// go, the new one comes last.
	id, _ := events.ParseUUID(s.NotificationID)
	in.items = append(in.items[len(decided)-1:], item{id: id})
	for _, pl := range decided {
		p.publish(tb, recipient, pl)
	}
	return decided
}

// inboxBytes is what the inbox stream holds, in bytes.
func (f *logFixture) inboxBytes(tb testing.TB) uint64 {
	tb.Helper()
	info, err := f.inbox.Info(tb.Context())
	if err != nil {
		tb.Fatal(err)
	}
	return info.State.Bytes
}

// fillOthers writes others' notifications, with large data, until f's
// inbox stream has written two blocks: a busy log.
func (p *publisher) fillOthers(tb testing.TB, f *logFixture) {
	tb.Helper()
	data := []byte(`{"note":"` + strings.Repeat("x", 15<<10) + `"}`)
	for i := 0; f.inboxBytes(tb) < 2*natslog.BlockBytes+1<<20; i++ {
		for j := range 100 {
			s := p.sent("other", i*100+j)
			s.Data = data
			p.publish(tb, fmt.Sprintf("user%d", j), s)
		}
		<-p.js.PublishAsyncComplete()
	}
}

// BenchmarkCompaction is the cost of compacting a full inbox (1,000
// pending) after 1,000 events since its last compaction (500 sends, each
// with the overflow delete it brings), on a busy log, overwriting what it
// removes or leaving it to the log's turnover; against a raw JetStream
// publish measured in the same run. It reports the bytes the log holds
// for the user after a long history against the bytes its pending
// notifications weigh as sent.
//
//	go test -run '^$' -bench Compaction -benchtime 20x ./commands/notifications/
func BenchmarkCompaction(b *testing.B) {
	for _, overwrite := range []bool{false, true} {
		name := map[bool]string{false: "turnover", true: "overwrite"}[overwrite]
		b.Run(name, func(b *testing.B) {
			f := newLogFixture(b, 0)
			ctx := b.Context()
			bytesHeld := func() uint64 { return f.inboxBytes(b) }
			p := newPublisher(b, f)
			p.fillOthers(b, f)
			if overwrite {
				f.compactor.cfg.EraseWithin = time.Nanosecond // no turnover is quick enough
			}
			// Raw publish: the baseline.
			const raw = 2000
			start := time.Now()
			for i := range raw {
				if _, err := p.js.Publish(ctx, "astro.events.w1.inbox.baseline", []byte(fmt.Sprint(i))); err != nil {
					b.Fatal(err)
				}
			}
			publish := time.Since(start) / raw
			// What one notification weighs as sent, and all but alice's.
			probe := bytesHeld()
			p.publish(b, "probe", p.sent("probe", 0))
			<-p.js.PublishAsyncComplete()
			others := bytesHeld()
			sent := others - probe

			in := NewInbox()
			i := 0
			history := func(events int) {
				for n := 0; n < events; i++ {
					n += len(p.send(b, in, "alice", i))
				}
				<-p.js.PublishAsyncComplete()
			}
			history(3000) // full, and more
			if _, err := f.compactor.Compact(ctx, "w1", "alice"); err != nil {
				b.Fatal(err)
			}
			var spent time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				history(1000)
				b.StartTimer()
				t0 := time.Now()
				res, err := f.compactor.Compact(ctx, "w1", "alice")
				spent += time.Since(t0)
				if err != nil {
					b.Fatal(err)
				}
				if res.Overwrote != overwrite {
					b.Fatalf("overwrote %v, want %v", res.Overwrote, overwrite)
				}
			}
			b.StopTimer()
			per := spent / time.Duration(b.N)
			b.ReportMetric(float64(per.Microseconds())/1000, "ms/compaction")
			b.ReportMetric(float64(per)/float64(publish), "x-publish")
			// After the last compaction the log holds the user's pending
			// notifications in the compaction: against their bytes as sent.
			b.ReportMetric(float64(bytesHeld()-others)/float64(MaxPending*sent), "log/pending")
		})
	}
}

// beforeErase is an eraser that calls before, once, ahead of its first
// removal.
type beforeErase struct {
	*natslog.Log
	before func()
}

func (l *beforeErase) EraseBefore(ctx context.Context, subject string, before uint64, overwrite bool) (int, error) {
	if b := l.before; b != nil {
		l.before = nil
		b()
	}
	return l.Log.EraseBefore(ctx, subject, before, overwrite)
}

// A user's erasure asked while a compaction of the same inbox removes
// what it replaced, and cut short by its request's deadline: it waits for
// the compaction, so the compaction's purge takes nothing the erasure has
// yet to overwrite, nor does its end close the erasure's ledger entry.
// Finishing the erasure then leaves its content in no file.
func TestErasureDuringACompactionOfTheSameInbox(t *testing.T) {
	f := newLogFixture(t, 1<<10)
	ctx := t.Context()
	for i := range 10 {
		f.send(t, "alice", fmt.Sprintf("SECRET-%d", i))
	}
	request, deadline := context.WithCancel(ctx)
	defer deadline()
	cutting := afterAppend{Log: f.log, after: func(e events.Event) {
		if e.Type == (events.InboxErased{}).EventType() {
			deadline()
		}
	}}
	store, err := commands.NewStore(cutting, f.log.Snapshots(), NewInbox, commands.StoreConfig{Name: SnapshotName})
	if err != nil {
		t.Fatal(err)
	}
	erasing := make(chan error, 1)
	var comp *Compactor
	hook := &beforeErase{Log: f.log, before: func() {
		go func() {
			_, err := comp.Erase(request, commands.Caller{WorkspaceID: "w1", UserID: "dpo"}, "alice")
			erasing <- err
		}()
		// Let the erasure run as far as it may while the compaction
		// waits: before each inbox had one operation at a time, it
		// appended its event here.
		for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if slices.ContainsFunc(f.history(t, "alice"), func(e events.Event) bool { return e.Type == (events.InboxErased{}).EventType() }) {
				return
			}
		}
	}}
	if comp, err = NewCompactor(store, cutting, hook, f.log.Pending(), time.Now, CompactorConfig{PartBytes: 1 << 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := comp.Compact(ctx, "w1", "alice"); err != nil {
		t.Fatal(err)
	}
	if err := <-erasing; err == nil {
		t.Fatal("the erasure was not cut short")
	}
	if err := f.compactor.FinishAll(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if files := natstest.FilesWith(t, f.dir, fmt.Sprintf("SECRET-%d", i)); len(files) != 0 {
			t.Errorf("SECRET-%d is still in %v", i, files)
		}
	}
}

// An erasure whose request ends while a compaction of the same inbox is
// under way gives up at once, with its request's error: it does not wait
// for the compaction past its deadline.
func TestErasureWaitingForACompactionKeepsItsDeadline(t *testing.T) {
	f := newLogFixture(t, 0)
	comp, finish := compactingAlice(t, f)
	request, cancel := context.WithCancel(t.Context())
	cancel() // its deadline has passed
	erased := make(chan error, 1)
	go func() {
		_, err := comp.Erase(request, commands.Caller{WorkspaceID: "w1", UserID: "dpo"}, "alice")
		erased <- err
	}()
	select {
	case err := <-erased:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the erasure: %v, want its request's end", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("the erasure waited for the compaction past its request's end")
	}
	finish()
}

// compactingAlice compacts alice's inbox (one notification) and holds the
// compaction where it erases what it replaced, so that it holds her
// inbox's lock; finish lets it end, and waits for it.
func compactingAlice(t *testing.T, f *logFixture) (comp *Compactor, finish func()) {
	t.Helper()
	f.send(t, "alice", "m")
	compacting, release := make(chan struct{}), make(chan struct{})
	held := &beforeErase{Log: f.log, before: func() { close(compacting); <-release }}
	comp, err := NewCompactor(f.store, f.log, held, f.log.Pending(), time.Now, CompactorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	compacted := make(chan error, 1)
	go func() { _, err := comp.Compact(t.Context(), "w1", "alice"); compacted <- err }()
	<-compacting
	var once sync.Once
	finish = func() {
		once.Do(func() {
			close(release)
			if err := <-compacted; err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(finish)
	return comp, finish
}

// Each inbox has a lock of its own: while one user's inbox is compacted,
// no other inbox waits, so another user's erasure does not wait out a
// compaction it has no part in, up to its request's deadline. When the
// inbox locks were 64 shared by hashing the subject, one in 64 did. The
// lock of an inbox goes when its last holder leaves.
func TestOtherInboxesDoNotWaitForACompaction(t *testing.T) {
	f := newLogFixture(t, 0)
	ctx := t.Context()
	comp, release := compactingAlice(t, f)

	// A thousand other inboxes: with 64 shared locks, about 16 of them
	// would share alice's.
	var waited []string
	for i := range 1000 {
		user := fmt.Sprint("user", i)
		probe, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		unlock, err := comp.lock(probe, events.Subject("w1", events.Aggregate{Kind: events.KindInbox, ID: user}))
		cancel()
		if err != nil {
			waited = append(waited, user)
			continue
		}
		unlock()
	}
	erase := "bob"
	if len(waited) > 0 {
		t.Errorf("%d inboxes waited for alice's compaction: %v", len(waited), waited)
		erase = waited[0]
	}
	f.send(t, erase, "m")
	request, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := comp.Erase(request, commands.Caller{WorkspaceID: "w1", UserID: "dpo"}, erase); err != nil {
		t.Errorf("erasing %s while alice's inbox is compacted: %v", erase, err)
	}

	release() // every operation has ended: nothing holds or waits
	if len(comp.locks) != 0 {
		t.Errorf("%d inbox locks left after every operation ended", len(comp.locks))
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

	comp, err := NewCompactor(f.store, f.log, &quickTurnover{Log: f.log}, f.log.Pending(), time.Now, CompactorConfig{})
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

// snapshotsDown is an eraser whose drop of the snapshots fails, as when
// the process stops right before it.
type snapshotsDown struct{ *natslog.Log }

func (snapshotsDown) EraseSnapshots(context.Context) error {
	return errors.New("stopped before the snapshots' drop")
}

// Finishing an erasure cut short, when a compaction cut short came after
// it, drops the snapshots before the erasure's entry in the ledger is
// closed: closed first (by the compaction that finishing runs), a stop in
// between left the inbox's snapshot, with the ids and read dates of what
// the erasure removed, and nothing to drop it later.
func TestFinishKeepsTheEntryUntilTheSnapshotsAreDropped(t *testing.T) {
	f := newLogFixture(t, 1<<10)
	ctx := t.Context()
	f.send(t, "alice", "erased")
	f.eraseCutShort(t, "alice")
	for i := range 10 {
		f.send(t, "alice", fmt.Sprintf("note %d", i))
	}
	f.compactPartly(t, "alice", 1)
	comp, err := NewCompactor(f.store, f.log, snapshotsDown{f.log}, f.log.Pending(), time.Now, CompactorConfig{PartBytes: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := comp.FinishAll(ctx, time.Time{}); err == nil {
		t.Fatal("finishing went through a failed drop of the snapshots")
	}
	subject := events.Subject("w1", events.Aggregate{Kind: events.KindInbox, ID: "alice"})
	if left, err := f.log.Pending().Unfinished(ctx); err != nil || !slices.Contains(left, subject) {
		t.Fatalf("the ledger after a finish stopped before the snapshots' drop: %v %v, want the erasure's entry", left, err)
	}
}
