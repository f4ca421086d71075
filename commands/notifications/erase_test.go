package notifications

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"astro/commands"
	"astro/events"
	"astro/events/natslog"
	"astro/events/natstest"
)

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

	// Cut after the first part: compacted again, whole. (The entry is a
	// compaction's, as the compactor writes it.)
	whole := f.state(t, "alice")
	if err := f.log.ErasureLedger().Begin(ctx, compactionKey(subject)); err != nil {
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
	if left, err := f.log.ErasureLedger().Unfinished(ctx); err != nil || len(left) != 0 {
		t.Fatalf("ledger after finishing: %v, %v", left, err)
	}

	// Cut after every part landed, before the erasure.
	before := f.state(t, "alice")
	if err := f.log.ErasureLedger().Begin(ctx, compactionKey(subject)); err != nil {
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
	if left, err := f.log.ErasureLedger().Unfinished(ctx); err != nil || len(left) != 0 {
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
	comp, err := NewCompactor(store, cutting, f.log, f.log.ErasureLedger(), time.Now, CompactorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := comp.Erase(request, commands.Caller{WorkspaceID: "w1", UserID: "dpo"}, user); err == nil {
		t.Fatal("the erasure was not cut short")
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
	finisher, err := NewCompactor(f.store, f.log, log, f.log.ErasureLedger(), time.Now, CompactorConfig{PartBytes: 1 << 10})
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
	if comp, err = NewCompactor(store, cutting, hook, f.log.ErasureLedger(), time.Now, CompactorConfig{PartBytes: 1 << 10}); err != nil {
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
	comp, err := NewCompactor(f.store, f.log, held, f.log.ErasureLedger(), time.Now, CompactorConfig{})
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
	comp, err := NewCompactor(f.store, f.log, snapshotsDown{f.log}, f.log.ErasureLedger(), time.Now, CompactorConfig{PartBytes: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := comp.FinishAll(ctx, time.Time{}); err == nil {
		t.Fatal("finishing went through a failed drop of the snapshots")
	}
	subject := events.Subject("w1", events.Aggregate{Kind: events.KindInbox, ID: "alice"})
	if left, err := f.log.ErasureLedger().Unfinished(ctx); err != nil || !slices.Contains(left, subject) {
		t.Fatalf("the ledger after a finish stopped before the snapshots' drop: %v %v, want the erasure's entry", left, err)
	}
}

// An erasure under way on another instance holds its ledger entry, which
// the lock of this instance's compactor knows nothing of: a compaction of
// the same inbox here must leave that entry for the erasure to close, or
// for FinishAll to find if the erasure is cut short. It closed it.
func TestACompactionLeavesAnErasuresEntry(t *testing.T) {
	f := newLogFixture(t, 1<<10)
	ctx := t.Context()
	for i := range 3 {
		f.send(t, "alice", fmt.Sprintf("note %d", i))
	}
	subject := events.Subject("w1", events.Aggregate{Kind: events.KindInbox, ID: "alice"})
	if err := f.log.ErasureLedger().Begin(ctx, subject); err != nil { // the other instance's erasure
		t.Fatal(err)
	}
	if _, err := f.compactor.Compact(ctx, "w1", "alice"); err != nil {
		t.Fatal(err)
	}
	left, err := f.log.ErasureLedger().Unfinished(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(left, []string{subject}) {
		t.Fatalf("the ledger after the compaction: %v, want the erasure's entry alone, %s", left, subject)
	}
}

// A user may be called "compaction": an erasure of their inbox cut short
// is finished like any other, not taken for a compaction's entry of
// another subject.
func TestFinishAllOfAUserCalledCompaction(t *testing.T) {
	f := newLogFixture(t, 1<<10)
	ctx := t.Context()
	f.send(t, "compaction", "note")
	subject := events.Subject("w1", events.Aggregate{Kind: events.KindInbox, ID: "compaction"})
	if err := f.log.ErasureLedger().Begin(ctx, subject); err != nil {
		t.Fatal(err)
	}
	if err := f.compactor.FinishAll(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if left, err := f.log.ErasureLedger().Unfinished(ctx); err != nil || len(left) != 0 {
		t.Fatalf("the ledger after FinishAll: %v, %v; want it empty", left, err)
	}
}
