package notifications

import (
	"context"
	"fmt"
	"reflect"
	"strings"
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
	if f.compactor, err = NewCompactor(f.store, l, l, l.ErasureLedger(), time.Now, CompactorConfig{PartBytes: partBytes}); err != nil {
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
	comp, err := NewCompactor(store, racing, f.log, f.log.ErasureLedger(), time.Now, CompactorConfig{PartBytes: 2 << 10})
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

// firstPartDuplicate is a log whose first compaction part is stored and
// then answered "duplicate": what a replicated (R3) stream answers a
// publish retried after its ack was lost, since it checks Nats-Msg-Id
// before the expected subject sequence.
type firstPartDuplicate struct {
	*natslog.Log
	done bool
}

func (l *firstPartDuplicate) Append(ctx context.Context, subject string, expected uint64, e events.Event) (uint64, error) {
	seq, err := l.Log.Append(ctx, subject, expected, e)
	if err == nil && e.Type == (events.InboxCompacted{}).EventType() && !l.done {
		l.done = true
		return seq, fmt.Errorf("append to %s: %w", subject, events.ErrAlreadyAppended)
	}
	return seq, err
}

// A compaction whose first part was answered "duplicate" (its ack lost,
// then retried) is still cut at that part: what the log keeps rebuilds the
// whole inbox.
func TestCompactionWhoseFirstPartWasADuplicate(t *testing.T) {
	f := newLogFixture(t, 2<<10) // small parts: a compaction of several events
	for i := range 30 {
		f.send(t, "alice", fmt.Sprintf("message %d", i))
	}
	dup := &firstPartDuplicate{Log: f.log}
	store, err := commands.NewStore(dup, f.log.Snapshots(), NewInbox, commands.StoreConfig{Name: SnapshotName})
	if err != nil {
		t.Fatal(err)
	}
	comp, err := NewCompactor(store, dup, f.log, f.log.ErasureLedger(), time.Now, CompactorConfig{PartBytes: 2 << 10})
	if err != nil {
		t.Fatal(err)
	}
	res, err := comp.Compact(t.Context(), "w1", "alice")
	if err != nil {
		t.Fatal(err)
	}
	if !dup.done {
		t.Fatal("no compaction part was answered duplicate")
	}
	left := f.history(t, "alice")
	if len(left) == 0 || len(left) != res.Parts || left[0].Seq != res.Seq || res.Pending != 30 {
		t.Fatalf("receipt %+v, %d events left in the log; want a compaction of 30 pending, cut at its first part", res, len(left))
	}
	if got := fold(t, left); len(got) != 30 {
		t.Fatalf("the log left rebuilds %d pending, want 30", len(got))
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
