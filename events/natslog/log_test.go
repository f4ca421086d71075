package natslog_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"astro/events"
	"astro/events/natslog"
	"astro/events/natsserver"
	"astro/events/natstest"
)

func openLog(t *testing.T) (*natslog.Log, *nats.Conn) { return openLogB(t) }

func openLogB(t testing.TB) (*natslog.Log, *nats.Conn) {
	t.Helper()
	nc := natstest.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := natslog.Open(ctx, nc, natslog.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return l, nc
}

var meta = events.Meta{WorkspaceID: "w1", ActorID: "u1", Integration: "tests", CorrelationID: "c1", Time: time.Date(2027, 1, 2, 3, 4, 5, 6000, time.UTC)}

func renamedB(b testing.TB, holiday string) events.Event { return renamed(b, "x", holiday, "a", "b") }

func renamed(t testing.TB, id, holiday, from, to string) events.Event {
	t.Helper()
	e, err := events.New(id, meta, events.Aggregate{Kind: events.KindHoliday, ID: holiday}, events.HolidayRenamed{HolidayID: holiday, OldReason: from, NewReason: to})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestAppendAndRead(t *testing.T) {
	l, _ := openLog(t)
	ctx := context.Background()
	subj := events.Subject("w1", events.Aggregate{Kind: events.KindHoliday, ID: "h1"})

	seq1, err := l.Append(ctx, subj, 0, renamed(t, "e1", "h1", "a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	// Another subject in between: expected sequences are per subject.
	other := events.Subject("w1", events.Aggregate{Kind: events.KindHoliday, ID: "h2"})
	if _, err := l.Append(ctx, other, 0, renamed(t, "x1", "h2", "a", "b")); err != nil {
		t.Fatal(err)
	}
	seq3, err := l.Append(ctx, subj, seq1, renamed(t, "e2", "h1", "b", "c"))
	if err != nil {
		t.Fatal(err)
	}
	if seq3 != 3 {
		t.Fatalf("appended at %d, want 3", seq3)
	}
	if seq3, err = l.Append(ctx, subj, seq3, renamed(t, "e3", "h1", "c", "d")); err != nil {
		t.Fatal(err)
	}

	var got []events.Event
	last, err := l.Read(ctx, subj, 0, func(e events.Event) error { got = append(got, e); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if last != seq3 || len(got) != 3 || got[0].ID != "e1" || got[2].ID != "e3" {
		t.Fatalf("read %d events up to %d: %+v", len(got), last, got)
	}
	e := got[0]
	if e.Seq != seq1 || e.Type != "HolidayRenamed" || e.Version != 1 || e.WorkspaceID != "w1" || e.ActorID != "u1" ||
		e.Integration != "tests" || e.CorrelationID != "c1" || !e.Time.Equal(meta.Time) || e.Aggregate.ID != "h1" {
		t.Fatalf("round trip lost metadata: %+v", e)
	}
	// Reading after the last event finds nothing.
	n := 0
	if _, err := l.Read(ctx, subj, seq3, func(events.Event) error { n++; return nil }); err != nil || n != 0 {
		t.Fatalf("read past the end: %d events, %v", n, err)
	}
}

func TestAppendConflict(t *testing.T) {
	l, _ := openLog(t)
	ctx := context.Background()
	subj := events.Subject("w1", events.Aggregate{Kind: events.KindHoliday, ID: "h1"})
	if _, err := l.Append(ctx, subj, 0, renamed(t, "e1", "h1", "a", "b")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		expected uint64
		e        events.Event
	}{
		{"stale sequence", 0, renamed(t, "e2", "h1", "a", "c")},
		{"future sequence", 7, renamed(t, "e5", "h1", "a", "c")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.Append(ctx, subj, tc.expected, tc.e)
			if !errors.Is(err, events.ErrConflict) {
				t.Fatalf("got %v, want ErrConflict", err)
			}
		})
	}
	n := 0
	l.Read(ctx, subj, 0, func(events.Event) error { n++; return nil })
	if n != 1 {
		t.Fatalf("%d events after conflicts, want 1: a conflicting append must leave nothing", n)
	}
}

// A retry of an append that did go in, but whose acknowledgement was lost,
// must report success with the original sequence, not a conflict, and must
// not append again.
func TestRetriedAppendIsRecognised(t *testing.T) {
	l, _ := openLog(t)
	ctx := context.Background()
	subj := events.Subject("w1", events.Aggregate{Kind: events.KindHoliday, ID: "h1"})
	for _, e := range []events.Event{
		renamed(t, "e1", "h1", "a", "b"),
		renamed(t, "e2", "h1", "b", "c"),
		renamed(t, "e3", "h1", "c", "d"),
	} {
		var expected uint64
		l.Read(ctx, subj, 0, func(e events.Event) error { expected = e.Seq; return nil })
		first, err := l.Append(ctx, subj, expected, e)
		if err != nil {
			t.Fatal(err)
		}
		again, err := l.Append(ctx, subj, expected, e)
		if err != nil {
			t.Fatalf("retry of %s: %v", e.ID, err)
		}
		if again != first {
			t.Fatalf("retry answered %d, first append %d", again, first)
		}
	}
	n := 0
	l.Read(ctx, subj, 0, func(events.Event) error { n++; return nil })
	if n != 3 {
		t.Fatalf("%d events, want 3", n)
	}
}

func TestSnapshots(t *testing.T) {
	l, _ := openLog(t)
	ctx := context.Background()
	s := l.Snapshots()
	if seq, data, err := s.Load(ctx, "inbox.v1.x"); err != nil || seq != 0 || data != nil {
		t.Fatalf("missing snapshot: %d %q %v", seq, data, err)
	}
	if err := s.Save(ctx, "inbox.v1.x", 42, []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	seq, data, err := s.Load(ctx, "inbox.v1.x")
	if err != nil || seq != 42 || string(data) != `{"a":1}` {
		t.Fatalf("snapshot: %d %q %v", seq, data, err)
	}
}

func TestOpenIsIdempotent(t *testing.T) {
	_, nc := openLog(t)
	for i := range 2 {
		if _, err := natslog.Open(context.Background(), nc, natslog.Config{}); err != nil {
			t.Fatalf("open #%d: %v", i+2, err)
		}
	}
}

func TestScan(t *testing.T) {
	l, _ := openLog(t)
	ctx := context.Background()
	for i := range 5 {
		h := fmt.Sprintf("h%d", i%2)
		subj := events.Subject("w1", events.Aggregate{Kind: events.KindHoliday, ID: h})
		var expected uint64
		l.Read(ctx, subj, 0, func(e events.Event) error { expected = e.Seq; return nil })
		if _, err := l.Append(ctx, subj, expected, renamed(t, fmt.Sprint("e", i), h, "a", "b")); err != nil {
			t.Fatal(err)
		}
	}
	var seqs []uint64
	err := l.Scan(ctx, events.KindSubjects(events.KindHoliday), events.ScanFrom{Seq: 2}, func(e events.Event) error {
		seqs = append(seqs, e.Seq)
		return nil
	})
	if err != nil || fmt.Sprint(seqs) != "[2 3 4 5]" {
		t.Fatalf("scan from 2: %v %v", seqs, err)
	}
	n := 0
	if err := l.Scan(ctx, "astro.events.w9.holiday.*", events.ScanFrom{}, func(events.Event) error { n++; return nil }); err != nil || n != 0 {
		t.Fatalf("scan of an empty filter: %d, %v", n, err)
	}
	// Sequences are per stream: a filter across both reads each, and
	// cannot start at a sequence.
	n = 0
	if err := l.Scan(ctx, "astro.events.>", events.ScanFrom{}, func(events.Event) error { n++; return nil }); err != nil || n == 0 {
		t.Fatalf("scan across both streams: %d, %v", n, err)
	}
	if err := l.Scan(ctx, "astro.events.>", events.ScanFrom{Seq: 2}, func(events.Event) error { return nil }); !errors.Is(err, natslog.ErrBothStreams) {
		t.Fatalf("scan across both streams from a sequence: %v, want ErrBothStreams", err)
	}
	// Several subjects of one stream come in its one order.
	seqs = nil
	one := func(h string) string { return events.Subject("w1", events.Aggregate{Kind: events.KindHoliday, ID: h}) }
	err = l.ScanSubjects(ctx, []string{one("h1"), one("h0")}, events.ScanFrom{}, func(e events.Event) error {
		seqs = append(seqs, e.Seq)
		return nil
	})
	if err != nil || fmt.Sprint(seqs) != "[1 2 3 4 5]" {
		t.Fatalf("scan of two subjects: %v %v", seqs, err)
	}
	inbox := events.Subject("w1", events.Aggregate{Kind: events.KindInbox, ID: "u1"})
	for _, filters := range [][]string{{one("h0"), inbox}, {one("h0"), "astro.events.>"}, nil} {
		if err := l.ScanSubjects(ctx, filters, events.ScanFrom{}, func(events.Event) error { return nil }); err == nil {
			t.Fatalf("scan of %v: no error, want one (no filter, or not one stream)", filters)
		}
	}
}

// An append of ids that went in earlier, with other appends since, is
// reported as already appended, never appended again.
func TestAppendOfOldIDsIsAlreadyAppended(t *testing.T) {
	l, _ := openLog(t)
	ctx := context.Background()
	subj := events.Subject("w1", events.Aggregate{Kind: events.KindHoliday, ID: "h1"})
	evs := []events.Event{renamed(t, "e1", "h1", "a", "b"), renamed(t, "e2", "h1", "b", "c"), renamed(t, "e3", "h1", "c", "d")}
	var last uint64
	for _, e := range evs {
		var err error
		if last, err = l.Append(ctx, subj, last, e); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range evs[:2] {
		if _, err := l.Append(ctx, subj, last, e); !errors.Is(err, events.ErrAlreadyAppended) {
			t.Fatalf("%s: got %v, want ErrAlreadyAppended", e.ID, err)
		}
	}
	n := 0
	l.Read(ctx, subj, 0, func(events.Event) error { n++; return nil })
	if n != 3 {
		t.Fatalf("%d events, want 3", n)
	}
}

// Concurrent callers share LastSeq's direct gets (rounds), and still every
// answer covers every append answered before its call: the reads' promise.
func TestLastSeqUnderConcurrentAppends(t *testing.T) {
	l, _ := openLog(t)
	ctx := t.Context()
	const writers, each, readers = 4, 40, 16
	filter := events.SubjectPrefix + ".w1.holiday.>"
	var answered atomic.Uint64 // the highest position an append has answered
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := fmt.Sprint("h", w)
			subj := events.Subject("w1", events.Aggregate{Kind: events.KindHoliday, ID: h})
			var last uint64
			for i := range each {
				seq, err := l.Append(ctx, subj, last, renamed(t, fmt.Sprint(h, "-", i), h, "a", "b"))
				if err != nil {
					t.Error(err)
					return
				}
				last = seq
				for prev := answered.Load(); prev < seq && !answered.CompareAndSwap(prev, seq); prev = answered.Load() {
				}
			}
		}()
	}
	done := make(chan struct{})
	var calls atomic.Int64
	var rg sync.WaitGroup
	for range readers {
		rg.Add(1)
		go func() {
			defer rg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				before := answered.Load()
				got, err := l.LastSeq(ctx, filter)
				if err != nil {
					t.Error(err)
					return
				}
				if got < before {
					t.Errorf("LastSeq answered %d after an append had answered %d", got, before)
					return
				}
				calls.Add(1)
			}
		}()
	}
	wg.Wait()
	close(done)
	rg.Wait()
	if got, err := l.LastSeq(ctx, filter); err != nil || got != writers*each {
		t.Fatalf("LastSeq after the appends: %d, %v; want %d", got, err, writers*each)
	}
	if calls.Load() == 0 {
		t.Fatal("no LastSeq call ran beside the appends")
	}
}

// The erasure ledger lists an erasure begun until it is done; Claim tells
// which of those a caller may finish.
func TestUnfinished(t *testing.T) {
	l, _ := openLog(t)
	ctx := t.Context()
	ledger := l.ErasureLedger()
	if err := ledger.Begin(ctx, "astro.w1.inbox.alice"); err != nil {
		t.Fatal(err)
	}
	if got, err := ledger.Unfinished(ctx); err != nil || len(got) != 1 || got[0] != "astro.w1.inbox.alice" {
		t.Fatalf("begun: %v %v, want the one erasure", got, err)
	}
	if err := ledger.Done(ctx, "astro.w1.inbox.alice"); err != nil {
		t.Fatal(err)
	}
	if got, err := ledger.Unfinished(ctx); err != nil || len(got) != 0 {
		t.Fatalf("after Done: %v %v", got, err)
	}
}

// Claiming an abandoned erasure makes it young again, so the next look of
// any other instance leaves it to the one that claimed it; a young one, or
// one finished, is not claimed.
func TestClaimAnAbandonedErasure(t *testing.T) {
	l, _ := openLog(t)
	ctx := t.Context()
	ledger := l.ErasureLedger()
	const key = "astro.w1.workspace.w1"
	if err := ledger.Begin(ctx, key); err != nil {
		t.Fatal(err)
	}
	if ok, err := ledger.Claim(ctx, key, time.Now().Add(-time.Hour)); err != nil || ok {
		t.Fatalf("a young erasure claimed: %v %v", ok, err)
	}
	abandoned := time.Now().Add(time.Second) // begun before it, so "abandoned"
	if ok, err := ledger.Claim(ctx, key, abandoned); err != nil || !ok {
		t.Fatalf("an abandoned erasure not claimed: %v %v", ok, err)
	}
	if ok, err := ledger.Claim(ctx, key, abandoned.Add(-time.Second)); err != nil || ok {
		t.Fatalf("an erasure claimed again at once, by the same measure: %v %v", ok, err)
	}
	if err := ledger.Done(ctx, key); err != nil {
		t.Fatal(err)
	}
	if ok, err := ledger.Claim(ctx, key, time.Time{}); err != nil || ok {
		t.Fatalf("a finished erasure claimed: %v %v", ok, err)
	}
}

// A parked event redriven (Unpark) leaves no copy of its content in the
// parked stream's files: a later erasure lists only what is still parked.
func TestUnparkOverwrites(t *testing.T) {
	dir := t.TempDir()
	l, err := natslog.Open(t.Context(), natstest.ConnTo(t, natstest.ServerWith(t, natsserver.Config{StoreDir: dir})), natslog.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h := nats.Header{}
	h.Set("ce-id", "x")
	if err := l.Park(t.Context(), "notifications", "astro.events.w1.inbox.alice", h, []byte(`{"message":"PARKED-SECRET-77"}`), 5, "boom"); err != nil {
		t.Fatal(err)
	}
	// Another after it, so that the first is not the stream's last.
	if err := l.Park(t.Context(), "holidays", "astro.events.w2.holiday.h", h, []byte(`{"reason":"other"}`), 9, "boom"); err != nil {
		t.Fatal(err)
	}
	var seq uint64
	if err := l.ListParked(t.Context(), "notifications", func(p natslog.Parked) error { seq = p.ParkSeq; return nil }); err != nil || seq == 0 {
		t.Fatalf("parked: seq %d, %v", seq, err)
	}
	if err := l.Unpark(t.Context(), seq); err != nil {
		t.Fatal(err)
	}
	if files := natstest.FilesWith(t, dir, "PARKED-SECRET-77"); len(files) != 0 {
		t.Fatalf("the redriven event's content is still in %v", files)
	}
}

// A read of something gone fails at once. A snapshot is an optimisation:
// its read gets one attempt, and a command that does not get it reads the
// log. A stream gone is answered as an append answers it. Retried as a
// passing fault within RetryFor, each held its caller 5 s first.
func TestReadsOfWhatIsGoneFailAtOnce(t *testing.T) {
	subject := events.Subject("w1", events.Aggregate{Kind: events.KindInbox, ID: "alice"})
	for _, tc := range []struct {
		name string
		gone func(*natslog.Log, jetstream.JetStream) error
		read func(*natslog.Log) error
		want error // any error when nil
	}{
		{"snapshot bucket",
			func(_ *natslog.Log, js jetstream.JetStream) error {
				return js.DeleteKeyValue(t.Context(), "ASTRO_SNAPSHOTS")
			},
			func(l *natslog.Log) error {
				_, _, err := l.Snapshots().Load(t.Context(), "inbox.w1.alice")
				return err
			}, nil},
		{"event stream",
			func(l *natslog.Log, js jetstream.JetStream) error {
				return js.DeleteStream(t.Context(), l.StreamFor(subject))
			},
			func(l *natslog.Log) error {
				_, err := l.Read(t.Context(), subject, 0, func(events.Event) error { return nil })
				return err
			}, natslog.ErrStreamMissing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := natstest.Conn(t)
			l, err := natslog.Open(t.Context(), nc, natslog.Config{AttemptTimeout: 200 * time.Millisecond, RetryFor: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.gone(l, js); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err = tc.read(l)
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("read of a %s that is gone: %v, want %v", tc.name, err, tc.want)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("the read took %v: retried as a passing fault", took)
			}
		})
	}
}

// An append at a stream position goes in only while the stream is there,
// whichever subject moved it; refused, it leaves nothing. Settled knows
// where this instance's own appends left the stream.
func TestAppendAtAPosition(t *testing.T) {
	l, _ := openLog(t)
	ctx := context.Background()
	h1 := events.Subject("w1", events.Aggregate{Kind: events.KindHoliday, ID: "h1"})
	h2 := events.Subject("w1", events.Aggregate{Kind: events.KindHoliday, ID: "h2"})
	if last, ok := l.Settled(events.KindHoliday); last != 0 || !ok {
		t.Fatalf("Settled before any append: %d %v, want 0 true", last, ok)
	}
	seq1, err := l.Append(ctx, h1, 0, renamed(t, "e1", "h1", "a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	if last, ok := l.Settled(events.KindHoliday); last != seq1 || !ok {
		t.Fatalf("Settled after an append: %d %v, want %d true", last, ok, seq1)
	}
	seq2, err := l.AppendAt(ctx, h1, seq1, seq1, renamed(t, "e2", "h1", "b", "c"))
	if err != nil || seq2 != seq1+1 {
		t.Fatalf("append at the stream's position: %d, %v", seq2, err)
	}
	// Another aggregate moves the stream: an append at the old position is
	// refused even though its own subject is where it expects.
	seq3, err := l.Append(ctx, h2, 0, renamed(t, "x1", "h2", "a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name         string
		expected, at uint64
		want         error
	}{
		{"the stream moved on", seq2, seq2, events.ErrLogMoved},
		{"the subject moved on too", seq1, seq2, events.ErrLogMoved},
		{"the subject moved on, no position", seq1, 0, events.ErrConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.AppendAt(ctx, h1, tc.expected, tc.at, renamed(t, "e3", "h1", "c", "d"))
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	if last, err := l.LastSeq(ctx, h1); err != nil || last != seq2 {
		t.Fatalf("h1's last event at %d (%v), want %d: a refused append must leave nothing", last, err, seq2)
	}
	if seq, err := l.AppendAt(ctx, h1, seq2, seq3, renamed(t, "e3", "h1", "c", "d")); err != nil || seq != seq3+1 {
		t.Fatalf("append at the stream's new position: %d, %v", seq, err)
	}
	// The log keeps what an append expected in the event's headers; a
	// projector that cannot apply the event parks it with them, and the
	// parked stream must not take them for its own.
	st, err := l.JetStream().Stream(ctx, l.Stream(events.KindHoliday))
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetMsg(ctx, seq2)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Park(ctx, "holidays", h1, m.Header, m.Data, seq2, "cannot apply"); err != nil {
		t.Fatalf("park an event appended at a position: %v", err)
	}
	// The inbox stream has its own positions.
	if last, ok := l.Settled(events.KindInbox); last != 0 || !ok {
		t.Fatalf("Settled of the inboxes: %d %v, want 0 true", last, ok)
	}
}

// After tells whether a stream holds anything after a position, across
// events erased from the middle of it, and each stream on its own.
func TestAfter(t *testing.T) {
	l, _ := openLog(t)
	ctx := t.Context()
	after := func(kind string, seq uint64) bool {
		t.Helper()
		more, err := l.After(ctx, kind, seq)
		if err != nil {
			t.Fatal(err)
		}
		return more
	}
	if after(events.KindInbox, 0) {
		t.Fatal("an empty stream holds something")
	}
	var seqs []uint64
	for i, user := range []string{"a1", "a2", "a1"} {
		agg := events.Aggregate{Kind: events.KindInbox, ID: user}
		e, err := events.New(fmt.Sprint("e", i), meta, agg, events.InboxErased{ErasureID: fmt.Sprint("x", i)})
		if err != nil {
			t.Fatal(err)
		}
		seq, err := l.Append(ctx, events.Subject("w1", agg), 0, e)
		if errors.Is(err, events.ErrConflict) { // a1's second: after its first
			seq, err = l.Append(ctx, events.Subject("w1", agg), seqs[0], e)
		}
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	// The middle event erased: what follows it still counts.
	if _, err := l.EraseBefore(ctx, events.Subject("w1", events.Aggregate{Kind: events.KindInbox, ID: "a2"}), seqs[1]+1, false); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kind string
		seq  uint64
		want bool
	}{
		{events.KindInbox, 0, true},
		{events.KindInbox, seqs[0], true},
		{events.KindInbox, seqs[2] - 1, true},
		{events.KindInbox, seqs[2], false},
		{events.KindHoliday, 0, false}, // the history stream is another
	} {
		if got := after(tc.kind, tc.seq); got != tc.want {
			t.Errorf("After(%s, %d) = %v, want %v", tc.kind, tc.seq, got, tc.want)
		}
	}
}

// AppendAfter appends while the last event on the guard's subjects is
// where its caller read it, and refuses once anything of them came after:
// two creates that both counted a workspace's holidays at one position
// cannot both land. Other workspaces do not move the guard.
func TestAppendAfter(t *testing.T) {
	l, _ := openLog(t)
	ctx := t.Context()
	guard := events.Subject("w1", events.Aggregate{Kind: events.KindHoliday, ID: "*"})
	h := func(ws, id string) string {
		return events.Subject(ws, events.Aggregate{Kind: events.KindHoliday, ID: id})
	}
	renamedIn := func(ws, id, eid string) events.Event {
		t.Helper()
		e, err := events.New(eid, events.Meta{WorkspaceID: ws, Time: time.Now()}, events.Aggregate{Kind: events.KindHoliday, ID: id},
			events.HolidayRenamed{HolidayID: id, OldReason: "a", NewReason: "b"})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	first, err := l.AppendAfter(ctx, h("w1", "h1"), guard, 0, renamedIn("w1", "h1", "e1"))
	if err != nil {
		t.Fatalf("the first of the workspace's holiday events, expected after none: %v", err)
	}
	if _, err := l.Append(ctx, h("w2", "h9"), 0, renamedIn("w2", "h9", "e9")); err != nil {
		t.Fatal(err)
	}
	second, err := l.AppendAfter(ctx, h("w1", "h2"), guard, first, renamedIn("w1", "h2", "e2"))
	if err != nil {
		t.Fatalf("after the last, with another workspace's event between: %v", err)
	}
	if _, err := l.AppendAfter(ctx, h("w1", "h3"), guard, first, renamedIn("w1", "h3", "e3")); !errors.Is(err, events.ErrLogMoved) {
		t.Fatalf("after a position the workspace's holidays moved past: %v, want ErrLogMoved", err)
	}
	if last, err := l.LastSeq(ctx, h("w1", "h3")); err != nil || last != 0 {
		t.Fatalf("h3's last event at %d (%v): a refused append must leave nothing", last, err)
	}
	// A retry of an append that landed is its own event, not a conflict.
	if seq, err := l.AppendAfter(ctx, h("w1", "h2"), guard, first, renamedIn("w1", "h2", "e2")); (err != nil && !errors.Is(err, events.ErrAlreadyAppended)) || seq != second {
		t.Fatalf("a retry of the second append: %d, %v; want %d", seq, err, second)
	}
	if _, err := l.AppendAfter(ctx, h("w2", "h4"), guard, second, renamedIn("w2", "h4", "e4")); err == nil {
		t.Fatal("an append outside its guard's subjects was taken")
	}
}
