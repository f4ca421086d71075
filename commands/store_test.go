package commands_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"astro/commands"
	"astro/commands/holidays"
	"astro/events"
	"astro/events/natslog"
	"astro/events/natstest"
)

func newLog(t testing.TB) *natslog.Log {
	t.Helper()
	l, err := natslog.Open(context.Background(), natstest.Conn(t), natslog.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// countingLog counts the events each Read hands out: what loading costs.
type countingLog struct {
	*natslog.Log
	mu   sync.Mutex
	read int
}

func (c *countingLog) Read(ctx context.Context, subject string, after uint64, fn func(events.Event) error) (uint64, error) {
	return c.Log.Read(ctx, subject, after, func(e events.Event) error {
		c.mu.Lock()
		c.read++
		c.mu.Unlock()
		return fn(e)
	})
}

func holidayStore(t *testing.T, l commands.Log, snaps commands.Snapshots, every uint64) *holidays.HolidayStore {
	t.Helper()
	s, err := commands.NewStore(l, snaps, holidays.NewHoliday, commands.StoreConfig{Name: "holiday.test", SnapshotEvery: every})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var caller = commands.Caller{UserID: "u1", WorkspaceID: "w1"}

func rename(ctx context.Context, s *holidays.HolidayStore, subject, id, to string) (commands.Result, error) {
	return s.Execute(ctx, subject, func(h *holidays.Holiday) ([]events.Event, error) {
		ps, err := h.Rename(id, to)
		if err != nil || len(ps) == 0 {
			return nil, err
		}
		return commands.NewEvents(caller, time.Now(), events.Aggregate{Kind: events.KindHoliday, ID: id}, ps...)
	})
}

func create(t *testing.T, s *holidays.HolidayStore, id string) string {
	t.Helper()
	agg := events.Aggregate{Kind: events.KindHoliday, ID: id}
	subject := events.Subject("w1", agg)
	_, err := s.Execute(context.Background(), subject, func(*holidays.Holiday) ([]events.Event, error) {
		return commands.NewEvents(caller, time.Now(), agg, events.HolidayCreated{HolidayID: id, Reason: "r0", Type: "global", DateFrom: "2027-01-01", DateTo: "2027-01-01"})
	})
	if err != nil {
		t.Fatal(err)
	}
	return subject
}

// Two stores on one log are two processes: each decides on its own cached
// state, and the log's expected-sequence check makes the loser re-read and
// decide again, so no rename is lost and none is applied on stale state.
func TestStoresInTwoProcessesRace(t *testing.T) {
	l := newLog(t)
	a, b := holidayStore(t, l, l.Snapshots(), 100), holidayStore(t, l, l.Snapshots(), 100)
	subject := create(t, a, "h1")
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 40 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := rename(ctx, s, subject, "h1", fmt.Sprint("r", i+1)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	var prev string
	n := 0
	_, err := l.Read(ctx, subject, 0, func(e events.Event) error {
		p, err := events.Decode(e)
		if err != nil {
			return err
		}
		switch p := p.(type) {
		case *events.HolidayCreated:
			prev = p.Reason
		case *events.HolidayRenamed:
			if p.OldReason != prev {
				return fmt.Errorf("rename at %d decided on stale state: old %q, current %q", e.Seq, p.OldReason, prev)
			}
			prev = p.NewReason
			n++
		}
		return nil
	})
	if err != nil || n != 40 {
		t.Fatalf("%d renames in the log, want 40: %v", n, err)
	}
}

// Loading an aggregate costs its snapshot plus the events after it, never
// its whole history.
func TestLoadReadsOnlyAfterSnapshot(t *testing.T) {
	l := newLog(t)
	writer := holidayStore(t, l, l.Snapshots(), 10)
	subject := create(t, writer, "h1")
	ctx := context.Background()
	for i := range 95 {
		if _, err := rename(ctx, writer, subject, "h1", fmt.Sprint("r", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	counting := &countingLog{Log: l}
	fresh := holidayStore(t, counting, l.Snapshots(), 10)
	err := fresh.Load(ctx, subject, func(h *holidays.Holiday, seq uint64) error {
		if h.Reason != "r95" || seq != 96 {
			return fmt.Errorf("loaded %q at %d, want r95 at 96", h.Reason, seq)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if counting.read >= 10 {
		t.Fatalf("loading read %d events: more than the events since the last snapshot", counting.read)
	}
}

// countingSnapshots counts the snapshots saved: what writing them costs.
type countingSnapshots struct {
	commands.Snapshots
	mu    sync.Mutex
	saved map[string]int
}

func (c *countingSnapshots) Save(ctx context.Context, key string, seq uint64, data []byte) error {
	c.mu.Lock()
	c.saved[key]++
	c.mu.Unlock()
	return c.Snapshots.Save(ctx, key, seq, data)
}

// A snapshot follows every SnapshotEvery events of its own aggregate, not
// every SnapshotEvery positions of the stream: with many aggregates their
// events lie far apart, and counting positions wrote a snapshot on every
// command.
func TestSnapshotsFollowTheAggregatesOwnEvents(t *testing.T) {
	l := newLog(t)
	snaps := &countingSnapshots{Snapshots: l.Snapshots(), saved: map[string]int{}}
	s := holidayStore(t, l, snaps, 10)
	ctx := context.Background()
	var subjects []string
	for i := range 20 {
		subjects = append(subjects, create(t, s, fmt.Sprint("h", i)))
	}
	for round := range 30 {
		for i, subject := range subjects {
			if _, err := rename(ctx, s, subject, fmt.Sprint("h", i), fmt.Sprint("r", round+1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// 31 events each, 20 positions apart: 3 snapshots each.
	for key, n := range snaps.saved {
		if n != 3 {
			t.Errorf("%s: %d snapshots of 31 events, want 3 (one per 10 of its events)", key, n)
		}
	}
	if len(snaps.saved) != len(subjects) {
		t.Errorf("snapshots of %d aggregates, want %d", len(snaps.saved), len(subjects))
	}
}

func TestDecisionErrorsAppendNothing(t *testing.T) {
	l := newLog(t)
	s := holidayStore(t, l, l.Snapshots(), 100)
	ctx := context.Background()
	subject := events.Subject("w1", events.Aggregate{Kind: events.KindHoliday, ID: "missing"})
	_, err := rename(ctx, s, subject, "missing", "x")
	if commands.ErrorCode(err) != commands.ENotFound {
		t.Fatalf("rename of a missing holiday: %v", err)
	}
	subject = create(t, s, "h1")
	res, err := rename(ctx, s, subject, "h1", "r0") // the current name
	if err != nil || len(res.Events) != 0 || res.Seq != 1 {
		t.Fatalf("no-op rename: %+v %v", res, err)
	}
	var e *commands.Error
	if !errors.As(commands.Invalid(map[string][]string{"f": {"m"}}), &e) || e.Code != commands.EInvalid {
		t.Fatal("Invalid is not an application error")
	}
}

// TestRequestRunAgainAppendsNothingTwice: a rename under an
// Idempotency-Key is appended, its answer lost (its process killed);
// another rename moves the holiday on; the client's retry comes after the
// log's duplicate window. Decided again, the retry would rename back and
// append its event, same id, a second time: run as a request that ran
// before (Caller.Again), it finds its event in the log and appends nothing.
func TestRequestRunAgainAppendsNothingTwice(t *testing.T) {
	l, err := natslog.Open(context.Background(), natstest.Conn(t), natslog.Config{DuplicateWindow: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s := holidayStore(t, l, l.Snapshots(), 100)
	const id = "0000a0a0-0000-4000-8000-000000000001"
	subject := create(t, s, id)
	ctx := context.Background()
	keyed := caller
	keyed.IdempotencyKey = "k1"
	renameAs := func(c commands.Caller, to string) {
		t.Helper()
		if _, err := commands.Run(ctx, s, c, events.Aggregate{Kind: events.KindHoliday, ID: id}, time.Now(), func(h *holidays.Holiday) ([]events.Payload, error) {
			return h.Rename(id, to)
		}); err != nil {
			t.Fatal(err)
		}
	}
	renameAs(keyed, "first")
	renameAs(caller, "second")
	// The server forgets ids after the window: only its passing makes the
	// retry late, so it is slept through.
	time.Sleep(300 * time.Millisecond)
	again := keyed
	again.Again = true
	renameAs(again, "first")

	var reasons []string
	if _, err := l.Read(ctx, subject, 0, func(e events.Event) error {
		if p, err := events.Decode(e); err == nil {
			if r, ok := p.(*events.HolidayRenamed); ok {
				reasons = append(reasons, r.NewReason)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(reasons) != "[first second]" {
		t.Fatalf("renames in the log: %v, want [first second]: the retried request appended again", reasons)
	}
}

// movingLog is another instance at work on the holiday: it renames it
// before each of the store's LastSeq calls and appends, so every decision
// the store makes rests on state that has moved on.
type movingLog struct {
	*natslog.Log
	subject, id string
	moves       int
}

func (m *movingLog) move(ctx context.Context) error {
	last, err := m.Log.LastSeq(ctx, m.subject)
	if err != nil {
		return err
	}
	m.moves++
	evs, err := commands.NewEvents(caller, time.Now(), events.Aggregate{Kind: events.KindHoliday, ID: m.id},
		events.HolidayRenamed{HolidayID: m.id, OldReason: "?", NewReason: fmt.Sprint("other", m.moves)})
	if err != nil {
		return err
	}
	_, err = m.Log.Append(ctx, m.subject, last, evs[0])
	return err
}

func (m *movingLog) LastSeq(ctx context.Context, subject string) (uint64, error) {
	if err := m.move(ctx); err != nil {
		return 0, err
	}
	return m.Log.LastSeq(ctx, subject)
}

func (m *movingLog) Append(ctx context.Context, subject string, expected uint64, e events.Event) (uint64, error) {
	if err := m.move(ctx); err != nil {
		return 0, err
	}
	return m.Log.Append(ctx, subject, expected, e)
}

// TestMaxAttemptsBoundsEveryRound: a command whose state keeps moving
// answers a conflict after MaxAttempts decisions, whether it lost its
// races by appending (the expected-sequence check) or by deciding a no-op
// or a refusal on stale state, and also when rounds of both kinds follow
// each other. Unbounded, it would decide and append until its deadline.
func TestMaxAttemptsBoundsEveryRound(t *testing.T) {
	const maxAttempts = 5
	tests := []struct {
		name string
		// decide answers the decision'th decision of the command.
		decide func(h *holidays.Holiday, decision int) ([]events.Event, error)
	}{
		{"no-op", func(*holidays.Holiday, int) ([]events.Event, error) { return nil, nil }},
		{"refusal", func(*holidays.Holiday, int) ([]events.Event, error) {
			return nil, commands.Invalid(map[string][]string{"reason": {"refused"}})
		}},
		{"lost appends", func(h *holidays.Holiday, _ int) ([]events.Event, error) { return renameTo(h, "h1", "mine") }},
		{"no-ops past the bound, then lost appends", func(h *holidays.Holiday, decision int) ([]events.Event, error) {
			if decision <= maxAttempts+2 {
				return nil, nil
			}
			return renameTo(h, "h1", "mine")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := newLog(t)
			subject := create(t, holidayStore(t, base, base.Snapshots(), 100), "h1")
			s, err := commands.NewStore(&movingLog{Log: base, subject: subject, id: "h1"}, base.Snapshots(), holidays.NewHoliday,
				commands.StoreConfig{Name: "holiday.moving", MaxAttempts: maxAttempts})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			decisions := 0
			_, err = s.Execute(ctx, subject, func(h *holidays.Holiday) ([]events.Event, error) {
				decisions++
				return tc.decide(h, decisions)
			})
			if commands.ErrorCode(err) != commands.EConflict || decisions != maxAttempts {
				t.Fatalf("after %d decisions: %v; want a conflict after %d", decisions, err, maxAttempts)
			}
		})
	}
}

func renameTo(h *holidays.Holiday, id, to string) ([]events.Event, error) {
	ps, err := h.Rename(id, to)
	if err != nil || len(ps) == 0 {
		return nil, err
	}
	return commands.NewEvents(caller, time.Now(), events.Aggregate{Kind: events.KindHoliday, ID: id}, ps...)
}

// A command on an aggregate whose events the log does not give whole is
// refused, never decided on a guess: with a 503 to retry when a retry may
// read them (an event a newer build wrote), and a 500 when none will (an
// event whose data is not its type's JSON), which a 503 would have
// clients retry for good.
func TestACommandOnEventsThatCannotBeReadSaysWhetherToRetry(t *testing.T) {
	for _, tc := range []struct {
		typ, data string
		want      string
	}{
		{"HolidayRenamed", `{"newReason": 7}`, commands.EInternal},
		{"HolidayMoved", `{}`, commands.EUnavailable},
	} {
		t.Run(tc.typ, func(t *testing.T) {
			l := newLog(t)
			s := holidayStore(t, l, l.Snapshots(), 100)
			id := events.NewID(time.Now())
			subject := create(t, s, id)
			bad := events.Event{ID: events.NewID(time.Now()), Type: tc.typ, Version: 1, WorkspaceID: "w1",
				Aggregate: events.Aggregate{Kind: events.KindHoliday, ID: id}, Time: time.Now().UTC(), Data: []byte(tc.data)}
			if _, err := l.JetStream().PublishMsg(t.Context(), natslog.Encode(bad)); err != nil {
				t.Fatal(err)
			}
			before, err := l.LastSeq(t.Context(), subject)
			if err != nil {
				t.Fatal(err)
			}
			_, err = rename(t.Context(), s, subject, id, "r1")
			if got := commands.ErrorCode(err); got != tc.want {
				t.Errorf("rename: %s (%v), want %s", got, err, tc.want)
			}
			if after, err := l.LastSeq(t.Context(), subject); err != nil || after != before {
				t.Errorf("the log moved from %d to %d (%v): nothing may be appended", before, after, err)
			}
		})
	}
}

// noneHeld is a workspace budget read from a read model that shows no
// holiday yet, as one that has not applied another instance's create.
type noneHeld struct{}

func (noneHeld) PeopleResourceDays(context.Context, string) (int64, error) { return 0, nil }
func (noneHeld) HolidayDays(context.Context, string) (int64, error)        { return 0, nil }

// Two instances count a workspace's holiday budget at one position of its
// holidays, and both create: the second lands only if nothing came after
// that position, else it is told to count again (events.ErrLogMoved), a
// retry under an Idempotency-Key too. A holiday an instance cached before
// another created it is caught up before the guarded append, which no
// longer checks its own expected sequence: a retry of its key past the
// log's duplicate window finds it created rather than creating it twice.
func TestCreatesAfterTheBudgetsPosition(t *testing.T) {
	ctx := context.Background()
	l, err := natslog.Open(ctx, natstest.Conn(t), natslog.Config{DuplicateWindow: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	instance := func() *holidays.Handlers {
		t.Helper()
		resources, err := commands.NewStore(l, l.Snapshots(), holidays.NewResource, commands.StoreConfig{Name: "resource.test"})
		if err != nil {
			t.Fatal(err)
		}
		h, err := holidays.NewHandlers(holidayStore(t, l, l.Snapshots(), 0), resources, func(string) bool { return true }, time.Now)
		if err != nil {
			t.Fatal(err)
		}
		h.LimitWorkspaces(noneHeld{}, 1_000_000, 366)
		return h
	}
	a, b := instance(), instance()
	holidaysOfW1 := events.Subject("w1", events.Aggregate{Kind: events.KindHoliday, ID: "*"})
	last := func() uint64 {
		t.Helper()
		seq, err := l.LastSeq(ctx, holidaysOfW1)
		if err != nil {
			t.Fatal(err)
		}
		return seq
	}
	day := func(key string, again bool, at uint64) holidays.Create {
		c := caller
		c.IdempotencyKey, c.Again = key, again
		return holidays.Create{Caller: c, Reason: ptr("A day off"), Type: "global", DateFrom: "2028-01-01", DateTo: "2028-01-01", BudgetAt: at}
	}

	counted := last()
	if _, _, _, err := b.Create.Handle(ctx, day("", false, counted)); err != nil {
		t.Fatal(err)
	}
	for _, again := range []bool{false, true} {
		if _, _, _, err := a.Create.Handle(ctx, day("k1", again, counted)); !errors.Is(err, events.ErrLogMoved) {
			t.Fatalf("a create counted before another landed (a retry: %v): %v, want ErrLogMoved", again, err)
		}
	}
	if _, _, _, err := a.Create.Handle(ctx, day("k1", false, last())); err != nil {
		t.Fatalf("counted again at the workspace's last holiday event: %v", err)
	}

	// b tries k2 at a stale position and caches its holiday as not created;
	// a creates it; past the duplicate window, b retries k2.
	if _, _, _, err := b.Create.Handle(ctx, day("k2", false, counted)); !errors.Is(err, events.ErrLogMoved) {
		t.Fatalf("a stale create: %v, want ErrLogMoved", err)
	}
	id, _, _, err := a.Create.Handle(ctx, day("k2", false, last()))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the log's duplicate window passes: nothing to poll
	// Its key's record gone (expired, or given up), the request is new.
	if _, _, res, err := b.Create.Handle(ctx, day("k2", false, last())); err != nil || len(res.Events) != 0 {
		t.Fatalf("a retry of a created holiday's key: %d events appended, %v; want none", len(res.Events), err)
	}
	n := 0
	if _, err := l.Read(ctx, events.Subject("w1", events.Aggregate{Kind: events.KindHoliday, ID: id}), 0, func(events.Event) error { n++; return nil }); err != nil || n != 1 {
		t.Fatalf("the holiday has %d events (%v), want its one creation", n, err)
	}
}

func ptr(s string) *string { return &s }
