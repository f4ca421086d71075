package natslog_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"astro/events"
	"astro/events/natslog"
	"astro/events/natsserver"
	"astro/events/natstest"
)

// With ASTRO_LOG_SYNC=always the embedded server acknowledges an append
// before its fsync, so an append must answer only after Sync, and never
// answer success when Sync failed.
func TestAppendAnswersAfterSync(t *testing.T) {
	srv := natstest.ServerWith(t, natsserver.Config{SyncAlways: true})
	nc := natstest.ConnTo(t, srv)

	var syncs int
	var syncErr error
	var l *natslog.Log
	subj := events.Subject("w1", events.Aggregate{Kind: events.KindHoliday, ID: "h1"})
	l, err := natslog.Open(t.Context(), nc, natslog.Config{Sync: func(ctx context.Context) error {
		syncs++
		// The server has the append by now: what Sync makes durable.
		if last, err := l.LastSeq(ctx, subj); err != nil || last == 0 {
			t.Errorf("Sync called before the append was acknowledged (last %d, %v)", last, err)
		}
		if err := srv.Sync(ctx); err != nil {
			return err
		}
		return syncErr
	}})
	if err != nil {
		t.Fatal(err)
	}

	diskGone := errors.New("disk gone")
	cases := []struct {
		name     string
		id       string
		expected uint64
		syncErr  error
		wantErr  error
	}{
		{"an append is synced", "e1", 0, nil, nil},
		{"a retry found in place is synced too", "e1", 0, nil, nil},
		{"a duplicate is synced too", "e1", 1, nil, events.ErrAlreadyAppended},
		{"a failed sync fails the append", "e2", 1, diskGone, diskGone},
		{"a conflict is not synced", "e3", 1, nil, events.ErrConflict},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := syncs
			syncErr = c.syncErr
			_, err := l.Append(t.Context(), subj, c.expected, renamed(t, c.id, "h1", "a", "b"))
			if !errors.Is(err, c.wantErr) || (c.wantErr == nil) != (err == nil) {
				t.Fatalf("Append: %v, want %v", err, c.wantErr)
			}
			wantSyncs := 1
			if errors.Is(c.wantErr, events.ErrConflict) {
				wantSyncs = 0
			}
			if got := syncs - before; got != wantSyncs {
				t.Fatalf("%d syncs, want %d", got, wantSyncs)
			}
		})
	}
}

// With ASTRO_LOG_SYNC=always a park and a removal are made durable before
// they return, as an append is: a projector's checkpoint moves past the
// event it parked, and an erasure closes its ledger entry after its
// removals, so a power loss must not keep what follows and lose them.
func TestParksAndRemovalsAnswerAfterSync(t *testing.T) {
	srv := natstest.ServerWith(t, natsserver.Config{SyncAlways: true})
	var syncs atomic.Int64
	var syncErr error
	l, err := natslog.Open(t.Context(), natstest.ConnTo(t, srv), natslog.Config{Sync: func(ctx context.Context) error {
		syncs.Add(1)
		if err := srv.Sync(ctx); err != nil {
			return err
		}
		return syncErr
	}})
	if err != nil {
		t.Fatal(err)
	}
	h1 := events.Subject("w1", events.Aggregate{Kind: events.KindHoliday, ID: "h1"})
	h2 := events.Subject("w1", events.Aggregate{Kind: events.KindHoliday, ID: "h2"})
	for _, e := range []events.Event{renamed(t, "e1", "h1", "a", "b"), renamed(t, "e2", "h2", "a", "b")} {
		if _, err := l.Append(t.Context(), events.Subject("w1", e.Aggregate), 0, e); err != nil {
			t.Fatal(err)
		}
	}
	park := func(ctx context.Context) error {
		return l.Park(ctx, "p1", h1, nats.Header{}, []byte("{}"), 1, "cannot apply")
	}

	diskGone := errors.New("disk gone")
	cases := []struct {
		name    string
		syncErr error
		op      func(context.Context) error
	}{
		{"a park", nil, park},
		{"a park whose sync failed fails", diskGone, park},
		{"a park again, a duplicate", nil, park},
		{"an erasure of parked copies", nil, func(ctx context.Context) error { _, err := l.EraseParked(ctx, h1); return err }},
		{"an erasure before a sequence", nil, func(ctx context.Context) error { _, err := l.EraseBefore(ctx, h1, 0, true); return err }},
		{"an erasure of whole subjects", nil, func(ctx context.Context) error { _, err := l.EraseSubjects(ctx, []string{h2}); return err }},
		{"the snapshots' drop", nil, l.Snapshots().Erase},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := syncs.Load()
			syncErr = c.syncErr
			if err := c.op(t.Context()); !errors.Is(err, c.syncErr) || (c.syncErr == nil) != (err == nil) {
				t.Fatalf("got %v, want %v", err, c.syncErr)
			}
			if got := syncs.Load() - before; got != 1 {
				t.Fatalf("%d syncs, want 1", got)
			}
		})
	}
}
