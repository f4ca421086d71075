package natslog_test

import (
	"context"
	"errors"
	"testing"

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
