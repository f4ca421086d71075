package erasure

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"astro/commands"
	"astro/commands/holidays"
	"astro/commands/notifications"
	"astro/events"
	"astro/events/natslog"
	"astro/events/natsserver"
	"astro/events/natstest"
	"astro/query/history"
)

// cutAfter is a log whose first append of an event of type typ is the
// last thing its request does: its deadline comes right after.
type cutAfter struct {
	*natslog.Log
	typ      string
	deadline context.CancelFunc
}

func (l cutAfter) Append(ctx context.Context, subject string, expected uint64, e events.Event) (uint64, error) {
	seq, err := l.Log.Append(ctx, subject, expected, e)
	if err == nil && e.Type == l.typ {
		l.deadline()
	}
	return seq, err
}

// eraserOn is an Eraser on l, with the ledger and snapshots of the log
// inboxLog.
func eraserOn(t *testing.T, l interface {
	Log
	notifications.Log
}, inboxLog *natslog.Log) *Eraser {
	t.Helper()
	store, err := commands.NewStore(l, inboxLog.Snapshots(), notifications.NewInbox, commands.StoreConfig{Name: notifications.SnapshotName})
	if err != nil {
		t.Fatal(err)
	}
	comp, err := notifications.NewCompactor(store, l, l, inboxLog.ErasureLedger(), time.Now, notifications.CompactorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	x, err := New(l, inboxLog.Snapshots(), inboxLog.ErasureLedger(), comp, time.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// openLog is a log on a server of its own, storing in dir.
func openLog(t *testing.T, dir string) *natslog.Log {
	t.Helper()
	l, err := natslog.Open(t.Context(), natstest.ConnTo(t, natstest.ServerWith(t, natsserver.Config{StoreDir: dir})), natslog.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// appendTo appends p on agg of workspace w1, by alice, after the
// subject's last event.
func appendTo(t *testing.T, l *natslog.Log, agg events.Aggregate, p events.Payload) (subject string) {
	t.Helper()
	e, err := events.New(events.NewID(time.Now()), events.Meta{WorkspaceID: "w1", ActorID: "alice", Time: time.Now()}, agg, p)
	if err != nil {
		t.Fatal(err)
	}
	subject = events.Subject("w1", agg)
	last, err := l.LastSeq(t.Context(), subject)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(t.Context(), subject, last, e); err != nil {
		t.Fatal(err)
	}
	return subject
}

// createHoliday appends a global holiday id of workspace w1 with reason.
func createHoliday(t *testing.T, l *natslog.Log, id, reason string) (subject string) {
	t.Helper()
	return appendTo(t, l, events.Aggregate{Kind: events.KindHoliday, ID: id}, events.HolidayCreated{HolidayID: id, Reason: reason,
		Type: events.HolidayGlobal, DateFrom: "2027-01-01", DateTo: "2027-01-01", CountryIDs: []string{}, ResourceIDs: []string{}})
}

// holidayHandlers are the holiday commands on l, resources snapshotted
// every resourceSnapshots events (0: the store's default).
func holidayHandlers(t *testing.T, l *natslog.Log, resourceSnapshots uint64) *holidays.Handlers {
	t.Helper()
	resources, err := commands.NewStore(l, l.Snapshots(), holidays.NewResource, commands.StoreConfig{Name: holidays.ResourceSnapshotName, SnapshotEvery: resourceSnapshots})
	if err != nil {
		t.Fatal(err)
	}
	hol, err := commands.NewStore(l, l.Snapshots(), holidays.NewHoliday, commands.StoreConfig{Name: holidays.HolidaySnapshotName})
	if err != nil {
		t.Fatal(err)
	}
	h, err := holidays.NewHandlers(hol, resources, func(string) bool { return true }, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// countEvents counts the events the log holds on subject.
func countEvents(t *testing.T, l *natslog.Log, subject string) int {
	t.Helper()
	n := 0
	if _, err := l.Read(t.Context(), subject, 0, func(events.Event) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// inboxWithSnapshot sends alice of workspace w1 four notifications
// through a store that snapshots every two events, and returns the store
// and the key of her inbox's snapshot, which it checks is there.
func inboxWithSnapshot(t *testing.T, l *natslog.Log) (store *notifications.Inboxes, key string) {
	t.Helper()
	store, err := commands.NewStore(l, l.Snapshots(), notifications.NewInbox, commands.StoreConfig{Name: notifications.SnapshotName, SnapshotEvery: 2})
	if err != nil {
		t.Fatal(err)
	}
	h, err := notifications.NewHandlers(store, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	svc := commands.Caller{WorkspaceID: "w1", UserID: "svc", Scopes: []string{notifications.ScopeSend}}
	for range 4 {
		if _, _, err := h.Send.Handle(t.Context(), notifications.Send{Caller: svc, RecipientID: "alice", SenderID: "0000b0b0-0000-4000-8000-000000000001", NotificationType: "t", Message: "m"}); err != nil {
			t.Fatal(err)
		}
	}
	key = notifications.SnapshotName + "." + events.Subject("w1", events.Aggregate{Kind: events.KindInbox, ID: "alice"})
	if seq, _, err := l.Snapshots().Load(t.Context(), key); err != nil || seq == 0 {
		t.Fatalf("no snapshot to erase: seq %d, %v", seq, err)
	}
	return store, key
}

// A workspace erasure that its request's deadline cut short: its holidays
// went first, and Run finishes the rest once it is abandoned, while the
// service runs on (it waited for the next start).
func TestWorkspaceErasureCutShortIsFinishedWhileRunning(t *testing.T) {
	l := openLog(t, t.TempDir())
	ctx := t.Context()
	holiday := createHoliday(t, l, "h1", "SECRET-OFFSITE")
	for _, user := range []string{"alice", "bob"} {
		appendTo(t, l, events.Aggregate{Kind: events.KindInbox, ID: user}, events.NotificationSent{NotificationID: events.NewID(time.Now()), RecipientID: user,
			SenderID: "0000b0b0-0000-4000-8000-000000000001", NotificationType: "t", Subject: "SECRET", CreateDate: time.Now().UTC()})
	}
	// The request: its deadline comes after the first inbox's erasure.
	request, deadline := context.WithCancel(ctx)
	cut := eraserOn(t, cutAfter{Log: l, typ: (events.InboxErased{}).EventType(), deadline: deadline}, l)
	dpo := commands.Caller{WorkspaceID: "w1", UserID: "dpo", Scopes: []string{ScopeErase}}
	if _, err := cut.Workspace(request, dpo); err == nil {
		t.Fatal("the erasure was not cut short")
	}
	if n := countEvents(t, l, holiday); n != 0 {
		t.Fatalf("the holiday's %d events outlived the erasure's first inbox", n)
	}
	if left, err := l.ErasureLedger().Unfinished(ctx); err != nil || len(left) == 0 {
		t.Fatalf("the ledger after the cut: %v %v, want the erasure unfinished", left, err)
	}

	running, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- eraserOn(t, l, l).Run(running, 20*time.Millisecond, 50*time.Millisecond) }()
	t.Cleanup(func() { stop(); <-done })
	deadlineAt := time.Now().Add(10 * time.Second)
	for {
		left, err := l.ErasureLedger().Unfinished(ctx)
		if err != nil {
			t.Fatal(err)
		}
		inboxes := countEvents(t, l, events.Subject("w1", events.Aggregate{Kind: events.KindInbox, ID: "alice"})) +
			countEvents(t, l, events.Subject("w1", events.Aggregate{Kind: events.KindInbox, ID: "bob"}))
		if len(left) == 0 && inboxes == 2 { // an InboxErased each
			return
		}
		if time.Now().After(deadlineAt) {
			t.Fatalf("the erasure was not finished: ledger %v, %d inbox events", left, inboxes)
		}
		time.Sleep(20 * time.Millisecond) // polling, bounded by the deadline
	}
}

// A workspace whose aggregates have snapshots, some saved over older
// ones: the erasure is answered, and no file of the log keeps a name a
// snapshot held. The bucket denies deletes (nats.go makes buckets so), and
// a save's older revision is only marked gone: the bucket is dropped whole.
func TestWorkspaceErasureDropsItsSnapshots(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir)
	ctx := t.Context()
	h := holidayHandlers(t, l, 2)
	upstream := commands.Caller{WorkspaceID: "w1", UserID: "sync", Scopes: []string{holidays.ScopeResourcesWrite}}
	const person = "00000000-0000-4000-8000-000000000001"
	for i := range 6 {
		if _, _, err := h.UpsertResource.Handle(ctx, holidays.UpsertResource{Caller: upstream, ResourceID: person, Name: fmt.Sprintf("PERSON-NAME-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	key := holidays.ResourceSnapshotName + "." + events.Subject("w1", events.Aggregate{Kind: events.KindResource, ID: person})
	if seq, _, err := l.Snapshots().Load(ctx, key); err != nil || seq == 0 {
		t.Fatalf("no snapshot to erase: seq %d, %v", seq, err)
	}

	dpo := commands.Caller{WorkspaceID: "w1", UserID: "dpo", Scopes: []string{ScopeErase}}
	if _, err := eraserOn(t, l, l).Workspace(ctx, dpo); err != nil {
		t.Fatalf("workspace erasure: %v", err)
	}
	if left, err := l.ErasureLedger().Unfinished(ctx); err != nil || len(left) != 0 {
		t.Fatalf("the ledger after the erasure: %v %v, want it empty", left, err)
	}
	for i := range 6 {
		if files := natstest.FilesWith(t, dir, fmt.Sprintf("PERSON-NAME-%d", i)); len(files) != 0 {
			t.Errorf("PERSON-NAME-%d is still in %v", i, files)
		}
	}
}

// A workspace erasure under an Idempotency-Key whose answer was lost,
// retried after the workspace wrote on (Caller.Again): the retry cuts at
// the first attempt's event, answers its receipt, and leaves what was
// written since.
func TestRetriedWorkspaceErasureCutsAtItsOwnEvent(t *testing.T) {
	l := openLog(t, t.TempDir())
	ctx := t.Context()
	createHoliday(t, l, "00000000-0000-4000-8000-0000000000a1", "r")
	x := eraserOn(t, l, l)
	dpo := commands.Caller{WorkspaceID: "w1", UserID: "dpo", Scopes: []string{ScopeErase}, IdempotencyKey: "offboard-1"}
	first, err := x.Workspace(ctx, dpo)
	if err != nil {
		t.Fatal(err)
	}
	later := createHoliday(t, l, "00000000-0000-4000-8000-0000000000b2", "r")

	dpo.Again = true
	again, err := x.Workspace(ctx, dpo)
	if err != nil {
		t.Fatal(err)
	}
	if again.ErasureID != first.ErasureID || again.Holidays != first.Holidays || !again.ErasedAt.Equal(first.ErasedAt) {
		t.Errorf("the retry's receipt %+v, want the first attempt's %+v", again, first)
	}
	if n := countEvents(t, l, later); n != 1 {
		t.Errorf("the holiday created after the erasure has %d events, want its 1", n)
	}
	if n := countEvents(t, l, events.Subject("w1", events.Aggregate{Kind: events.KindWorkspace, ID: "w1"})); n != 1 {
		t.Errorf("%d WorkspaceErased events, want the first attempt's only", n)
	}
}

// failingFor is a log whose erasures of subjects with prefix fail.
type failingFor struct {
	*natslog.Log
	prefix string
}

func (l failingFor) EraseBefore(ctx context.Context, subject string, before uint64, overwrite bool) (int, error) {
	if strings.HasPrefix(subject, l.prefix) {
		return 0, errors.New("disk full")
	}
	return l.Log.EraseBefore(ctx, subject, before, overwrite)
}

// Finishing the erasures cut short: one that fails (here w1's) reports
// its error and does not keep the others (w2's) from being finished.
func TestFinishGoesPastAnErasureThatFails(t *testing.T) {
	l := openLog(t, t.TempDir())
	ctx := t.Context()
	for _, ws := range []string{"w1", "w2"} {
		request, deadline := context.WithCancel(ctx)
		cut := eraserOn(t, cutAfter{Log: l, typ: (events.WorkspaceErased{}).EventType(), deadline: deadline}, l)
		if _, err := cut.Workspace(request, commands.Caller{WorkspaceID: ws, UserID: "dpo", Scopes: []string{ScopeErase}}); err == nil {
			t.Fatalf("%s's erasure was not cut short", ws)
		}
	}
	err := eraserOn(t, failingFor{Log: l, prefix: events.SubjectPrefix + ".w1."}, l).Finish(ctx, time.Time{})
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Finish: %v, want w1's failure", err)
	}
	left, err := l.ErasureLedger().Unfinished(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{events.Subject("w1", events.Aggregate{Kind: events.KindWorkspace, ID: "w1"})}; !slices.Equal(left, want) {
		t.Fatalf("unfinished after Finish: %v, want %v", left, want)
	}
}

// A user's erasure takes their inbox's snapshot too: it holds the ids and
// read dates of every notification it erased.
func TestUserErasureDropsTheInboxSnapshot(t *testing.T) {
	l := openLog(t, t.TempDir())
	ctx := t.Context()
	_, key := inboxWithSnapshot(t, l)
	dpo := commands.Caller{WorkspaceID: "w1", UserID: "dpo", Scopes: []string{ScopeErase}}
	if _, err := eraserOn(t, l, l).User(ctx, dpo, "alice"); err != nil {
		t.Fatal(err)
	}
	if seq, _, err := l.Snapshots().Load(ctx, key); err != nil || seq != 0 {
		t.Fatalf("after the erasure the inbox's snapshot is at %d (%v), want none", seq, err)
	}
}

// A user's erasure cut short right after its event: finishing it (the
// compactor's pass) drops the inbox's snapshot too, before the ledger
// forgets the erasure.
func TestUserErasureCutShortDropsTheInboxSnapshot(t *testing.T) {
	l := openLog(t, t.TempDir())
	ctx := t.Context()
	store, key := inboxWithSnapshot(t, l)
	request, deadline := context.WithCancel(ctx)
	cut := eraserOn(t, cutAfter{Log: l, typ: (events.InboxErased{}).EventType(), deadline: deadline}, l)
	if _, err := cut.User(request, commands.Caller{WorkspaceID: "w1", UserID: "dpo", Scopes: []string{ScopeErase}}, "alice"); err == nil {
		t.Fatal("the erasure was not cut short")
	}
	comp, err := notifications.NewCompactor(store, l, l, l.ErasureLedger(), time.Now, notifications.CompactorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := comp.FinishAll(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if left, err := l.ErasureLedger().Unfinished(ctx); err != nil || len(left) != 0 {
		t.Fatalf("the ledger after finishing: %v %v, want it empty", left, err)
	}
	if seq, _, err := l.Snapshots().Load(ctx, key); err != nil || seq != 0 {
		t.Fatalf("after the finished erasure the inbox's snapshot is at %d (%v), want none", seq, err)
	}
}

// snapshotDrops is a log that counts the inbox erasures' drops of the
// snapshot bucket.
type snapshotDrops struct {
	*natslog.Log
	n *int
}

func (l snapshotDrops) EraseSnapshots(ctx context.Context) error {
	*l.n++
	return l.Log.EraseSnapshots(ctx)
}

// A workspace's erasure drops the snapshot bucket once, after its last
// inbox, not once an inbox: the whole service would otherwise run without
// snapshots for as long as a large workspace's erasure takes.
func TestWorkspaceErasureDropsTheSnapshotsOnce(t *testing.T) {
	l := openLog(t, t.TempDir())
	_, key := inboxWithSnapshot(t, l)
	for _, user := range []string{"bob", "carol"} {
		appendTo(t, l, events.Aggregate{Kind: events.KindInbox, ID: user}, events.NotificationSent{NotificationID: events.NewID(time.Now()), RecipientID: user,
			SenderID: "0000b0b0-0000-4000-8000-000000000001", NotificationType: "t", Subject: "s", CreateDate: time.Now().UTC()})
	}
	drops := 0
	dpo := commands.Caller{WorkspaceID: "w1", UserID: "dpo", Scopes: []string{ScopeErase}}
	res, err := eraserOn(t, snapshotDrops{Log: l, n: &drops}, l).Workspace(t.Context(), dpo)
	if err != nil {
		t.Fatal(err)
	}
	if res.Inboxes != 3 || drops != 0 {
		t.Errorf("%d inboxes erased, with %d drops of the snapshots by the inboxes' erasures; want 3, and the workspace's one drop only", res.Inboxes, drops)
	}
	if seq, _, err := l.Snapshots().Load(t.Context(), key); err != nil || seq != 0 {
		t.Fatalf("after the erasure alice's inbox snapshot is at %d (%v), want none", seq, err)
	}
}

// renameAfter is a log on which, once the erasure's event is appended and
// before anything is removed, another instance's command runs: a rename
// decided in that window on the state it read before the erasure.
type renameAfter struct {
	*natslog.Log
	window func()
}

func (l renameAfter) Append(ctx context.Context, subject string, expected uint64, e events.Event) (uint64, error) {
	seq, err := l.Log.Append(ctx, subject, expected, e)
	if err == nil && e.Type == (events.WorkspaceErased{}).EventType() {
		l.window()
	}
	return seq, err
}

// A rename racing a workspace's erasure, appended after its event on a
// holiday created before it: the erasure removes it with the holiday, so
// a rename on the same instance's stale state, and the holiday's history,
// answer not found. A holiday created after the erasure's event stays.
func TestARenameRacingAWorkspaceErasureGoesWithItsHoliday(t *testing.T) {
	l := openLog(t, t.TempDir())
	ctx := t.Context()
	h := holidayHandlers(t, l, 0)
	hr := commands.Caller{WorkspaceID: "w1", UserID: "hr"}
	create := func() string {
		t.Helper()
		reason := "SECRET-OFFSITE"
		id, _, _, err := h.Create.Handle(ctx, holidays.Create{Caller: hr, Reason: &reason, Type: events.HolidayGlobal, DateFrom: "2027-01-01", DateTo: "2027-01-01"})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	rename := func(id string) error {
		reason := "RENAMED-" + events.NewID(time.Now())
		_, _, err := h.Rename.Handle(ctx, holidays.Rename{Caller: hr, HolidayID: id, Reason: &reason})
		return err
	}
	erased := create()
	var later string
	racing := renameAfter{Log: l, window: func() {
		if err := rename(erased); err != nil {
			t.Errorf("the rename in the erasure's window: %v", err)
		}
		later = create()
	}}
	dpo := commands.Caller{WorkspaceID: "w1", UserID: "dpo", Scopes: []string{ScopeErase}}
	if _, err := eraserOn(t, racing, l).Workspace(ctx, dpo); err != nil {
		t.Fatal(err)
	}

	if n := countEvents(t, l, events.Subject("w1", events.Aggregate{Kind: events.KindHoliday, ID: erased})); n != 0 {
		t.Errorf("the erased holiday's subject keeps %d events", n)
	}
	if err := rename(erased); commands.ErrorCode(err) != commands.ENotFound {
		t.Errorf("a rename of the erased holiday after the erasure: %v, want not found", err)
	}
	hist, err := history.NewHolidays(l)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := hist.History(ctx, "w1", erased, 0, 0); commands.ErrorCode(err) != commands.ENotFound {
		t.Errorf("the erased holiday's history: %+v, %v, want not found", got, err)
	}
	if n := countEvents(t, l, events.Subject("w1", events.Aggregate{Kind: events.KindHoliday, ID: later})); n != 1 {
		t.Errorf("the holiday created after the erasure's event has %d events, want its 1", n)
	}
	if err := rename(later); err != nil {
		t.Errorf("a rename of the holiday created after the erasure's event: %v", err)
	}
}

// An erasure stopped once a holiday's creation was gone, leaving a rename
// appended after the erasure's event: finishing it empties the subject,
// though nothing left in it comes before that event.
func TestFinishTakesWhatIsLeftOfAHolidayWhoseCreationWent(t *testing.T) {
	l := openLog(t, t.TempDir())
	ctx := t.Context()
	holiday := createHoliday(t, l, "h1", "SECRET-OFFSITE")
	request, deadline := context.WithCancel(ctx)
	cut := eraserOn(t, cutAfter{Log: l, typ: (events.WorkspaceErased{}).EventType(), deadline: deadline}, l)
	if _, err := cut.Workspace(request, commands.Caller{WorkspaceID: "w1", UserID: "dpo", Scopes: []string{ScopeErase}}); err == nil {
		t.Fatal("the erasure was not cut short")
	}
	erasure, err := l.LastSeq(ctx, events.Subject("w1", events.Aggregate{Kind: events.KindWorkspace, ID: "w1"}))
	if err != nil {
		t.Fatal(err)
	}
	appendTo(t, l, events.Aggregate{Kind: events.KindHoliday, ID: "h1"}, events.HolidayRenamed{HolidayID: "h1", OldReason: "SECRET-OFFSITE", NewReason: "SECRET-RENAMED"})
	// What the erasure had done before it stopped: the creation went first.
	if _, err := l.EraseBefore(ctx, holiday, erasure, true); err != nil {
		t.Fatal(err)
	}
	if err := eraserOn(t, l, l).Finish(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if n := countEvents(t, l, holiday); n != 0 {
		t.Errorf("the holiday keeps %d events after the erasure was finished", n)
	}
}

// A message on a holiday's subject that is no event (one stored by whatever
// could publish there, or by the reply-subject hole closed in natscmd) is
// erased with the workspace: the erasure decided what to take by decoding
// each holiday's first event, and stopped, for good, on one that did not
// decode, after its WorkspaceErased was appended.
func TestAMalformedHolidayMessageIsErasedToo(t *testing.T) {
	l := openLog(t, t.TempDir())
	ctx := t.Context()
	good := createHoliday(t, l, "h1", "SECRET")
	bad := events.Subject("w1", events.Aggregate{Kind: events.KindHoliday, ID: "h2"})
	if _, err := l.JetStream().Publish(ctx, bad, []byte(`{"hasError":true,"statusCode":"Unauthorized"}`)); err != nil {
		t.Fatal(err)
	}
	dpo := commands.Caller{WorkspaceID: "w1", UserID: "dpo", Scopes: []string{ScopeErase}}
	if _, err := eraserOn(t, l, l).Workspace(ctx, dpo); err != nil {
		t.Fatalf("workspace erasure: %v", err)
	}
	for _, s := range []string{good, bad} {
		if seq, _, err := l.First(ctx, s); err != nil || seq != 0 {
			t.Errorf("%s after the erasure: first message %d, %v", s, seq, err)
		}
	}
}

// A workspace erased twice: each erasure's WorkspaceErased is its audit
// record and names no personal data, so the second keeps the first's;
// everything else of the workspace before it goes, on the workspace's
// own subject too (a holiday's event stands in there for a workspace
// event of another type, which has none yet).
func TestASecondWorkspaceErasureKeepsTheFirstsRecord(t *testing.T) {
	l := openLog(t, t.TempDir())
	ctx := t.Context()
	x := eraserOn(t, l, l)
	workspace := events.Subject("w1", events.Aggregate{Kind: events.KindWorkspace, ID: "w1"})
	var holidays []string
	for i, by := range []string{"GDPR-7", "SECOND"} {
		holidays = append(holidays, createHoliday(t, l, fmt.Sprintf("h%d", i), "SECRET"))
		appendTo(t, l, events.Aggregate{Kind: events.KindWorkspace, ID: "w1"}, events.HolidayCreated{HolidayID: "w", Reason: "SECRET",
			Type: events.HolidayGlobal, DateFrom: "2027-01-01", DateTo: "2027-01-01", CountryIDs: []string{}, ResourceIDs: []string{}})
		if _, err := x.Workspace(ctx, commands.Caller{WorkspaceID: "w1", UserID: by, Scopes: []string{ScopeErase}}); err != nil {
			t.Fatalf("erasure by %s: %v", by, err)
		}
	}
	var got []string
	if _, err := l.Read(ctx, workspace, 0, func(e events.Event) error { got = append(got, e.Type+" by "+e.ActorID); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := []string{"WorkspaceErased by GDPR-7", "WorkspaceErased by SECOND"}; !slices.Equal(got, want) {
		t.Errorf("the workspace's events: %v, want %v", got, want)
	}
	for _, s := range holidays {
		if n := countEvents(t, l, s); n != 0 {
			t.Errorf("%s has %d events after the erasures", s, n)
		}
	}
}

// TestAFinishedWorkspaceErasureKeepsWhatErasedInboxesGotSince: an erasure
// cut short after its first inbox, finished later, finds that inbox's
// InboxErased and cuts there: a notification the inbox received in
// between stays. Before, the finish appended another InboxErased at the
// inbox's end and took it.
func TestAFinishedWorkspaceErasureKeepsWhatErasedInboxesGotSince(t *testing.T) {
	l := openLog(t, t.TempDir())
	send := func(user string) {
		t.Helper()
		appendTo(t, l, events.Aggregate{Kind: events.KindInbox, ID: user}, events.NotificationSent{NotificationID: events.NewID(time.Now()), RecipientID: user,
			SenderID: "0000b0b0-0000-4000-8000-000000000001", NotificationType: "t", Subject: "s", CreateDate: time.Now().UTC()})
	}
	send("alice")
	request, deadline := context.WithCancel(t.Context())
	cut := eraserOn(t, cutAfter{Log: l, typ: (events.InboxErased{}).EventType(), deadline: deadline}, l)
	dpo := commands.Caller{WorkspaceID: "w1", UserID: "dpo", Scopes: []string{ScopeErase}}
	if _, err := cut.Workspace(request, dpo); err == nil {
		t.Fatal("the erasure was not cut short")
	}
	send("alice") // after her inbox's erasure
	if err := eraserOn(t, l, l).Finish(t.Context(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	if _, err := l.Read(t.Context(), events.Subject("w1", events.Aggregate{Kind: events.KindInbox, ID: "alice"}), 0, func(e events.Event) error {
		kinds = append(kinds, e.Type)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"InboxErased", "NotificationSent"}; !slices.Equal(kinds, want) {
		t.Fatalf("alice's inbox after the finish: %v, want %v", kinds, want)
	}
}
