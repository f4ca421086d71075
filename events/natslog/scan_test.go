package natslog_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"astro/events"
	"astro/events/natslog"
)

// Every read through an ordered consumer leaves nothing on the server once
// it returns: reads come from user requests (a holiday's asOf, a parked
// listing), so a consumer left behind each time is server memory that
// clients drive.
func TestReadsLeaveNoConsumers(t *testing.T) {
	holiday := events.KindSubjects(events.KindHoliday)
	none := func(events.Event) error { return nil }
	errEnough := errors.New("enough")
	for _, tc := range []struct {
		name string
		read func(ctx context.Context, l *natslog.Log) error
	}{
		{"scan to the end", func(ctx context.Context, l *natslog.Log) error {
			return l.Scan(ctx, holiday, events.ScanFrom{Seq: 2}, none)
		}},
		{"scan of an empty range", func(ctx context.Context, l *natslog.Log) error {
			return l.Scan(ctx, "astro.events.w9.holiday.*", events.ScanFrom{}, none)
		}},
		{"scan its callback stops", func(ctx context.Context, l *natslog.Log) error {
			err := l.Scan(ctx, holiday, events.ScanFrom{}, func(events.Event) error { return errEnough })
			if !errors.Is(err, errEnough) {
				return fmt.Errorf("scan stopped by its callback: %v, want %v", err, errEnough)
			}
			return nil
		}},
		{"scan across both streams", func(ctx context.Context, l *natslog.Log) error {
			return l.Scan(ctx, "astro.events.>", events.ScanFrom{}, none)
		}},
		{"scan of several subjects its callback stops", func(ctx context.Context, l *natslog.Log) error {
			err := l.ScanSubjects(ctx, []string{holidaySubject("h0"), holidaySubject("h1")}, events.ScanFrom{}, func(events.Event) error { return errEnough })
			if !errors.Is(err, errEnough) {
				return fmt.Errorf("scan stopped by its callback: %v, want %v", err, errEnough)
			}
			return nil
		}},
		{"read all of a subject", func(ctx context.Context, l *natslog.Log) error {
			return l.ReadAll(ctx, holidaySubject("h0"), none)
		}},
		{"follow until cancelled", func(ctx context.Context, l *natslog.Log) error {
			ctx, cancel := context.WithCancel(ctx)
			err := l.Follow(ctx, holiday, events.ScanFrom{}, func(e events.Event) error {
				if e.Seq == 5 {
					cancel()
				}
				return nil
			})
			if !errors.Is(err, context.Canceled) {
				return fmt.Errorf("follow: %v, want context.Canceled", err)
			}
			return nil
		}},
		{"erase, reading headers", func(ctx context.Context, l *natslog.Log) error {
			_, err := l.EraseBefore(ctx, holidaySubject("h0"), 3, false)
			return err
		}},
		{"list parked events", func(ctx context.Context, l *natslog.Log) error {
			for seq := range uint64(3) {
				if err := l.Park(ctx, "p1", holidaySubject("h0"), nats.Header{}, []byte("{}"), seq+1, "test"); err != nil {
					return err
				}
			}
			n := 0
			if err := l.ListParked(ctx, "p1", func(natslog.Parked) error { n++; return nil }); err != nil || n != 3 {
				return fmt.Errorf("listed %d parked events, want 3: %v", n, err)
			}
			return nil
		}},
		{"list no parked events", func(ctx context.Context, l *natslog.Log) error {
			return l.ListParked(ctx, "p1", func(natslog.Parked) error { return nil })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := openLog(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			appendHolidays(ctx, t, l, 5)
			if err := tc.read(ctx, l); err != nil {
				t.Fatal(err)
			}
			noConsumersLeft(ctx, t, l.JetStream())
		})
	}
}

func holidaySubject(id string) string {
	return events.Subject("w1", events.Aggregate{Kind: events.KindHoliday, ID: id})
}

// appendHolidays appends n events, alternating between two holidays.
func appendHolidays(ctx context.Context, t *testing.T, l *natslog.Log, n int) {
	t.Helper()
	last := map[string]uint64{}
	for i := range n {
		h := fmt.Sprintf("h%d", i%2)
		seq, err := l.Append(ctx, holidaySubject(h), last[h], renamed(t, fmt.Sprint("e", i), h, "a", "b"))
		if err != nil {
			t.Fatal(err)
		}
		last[h] = seq
	}
}

// noConsumersLeft waits a few seconds for every stream to have no
// consumer: the delete may run after the read returns, but long before
// the server's inactivity threshold would remove a consumer forgotten.
func noConsumersLeft(ctx context.Context, t *testing.T, js jetstream.JetStream) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		left, err := consumers(ctx, js)
		if err != nil {
			t.Fatal(err)
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumers left on the server: %v", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// consumers lists "stream/consumer" for every consumer of every stream.
func consumers(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	var out []string
	streams := js.StreamNames(ctx)
	for name := range streams.Name() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return nil, err
		}
		names := st.ConsumerNames(ctx)
		for c := range names.Name() {
			out = append(out, name+"/"+c)
		}
		if err := names.Err(); err != nil {
			return nil, err
		}
	}
	return out, streams.Err()
}

// A message on an event subject that is no event (no ce-* headers) ends a
// scan, whose readers fold events and must not fold past a gap, but not a
// tail: a tail shows it as recorded, in the order of the log, and goes on
// to the events after it, following or not.
func TestTailShowsMalformedMessagesAndGoesOn(t *testing.T) {
	l, _ := openLog(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range []string{"e1", "bad", "e2", "e3"} {
		if id == "bad" {
			if _, err := l.JetStream().Publish(ctx, holidaySubject("h0"), []byte("garbage")); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := l.Append(ctx, holidaySubject(id), 0, renamed(t, id, id, "a", "b")); err != nil {
			t.Fatal(err)
		}
	}
	holiday := events.KindSubjects(events.KindHoliday)

	if err := l.Scan(ctx, holiday, events.ScanFrom{}, func(events.Event) error { return nil }); !errors.Is(err, events.ErrMalformed) {
		t.Fatalf("scan past a malformed message: %v, want %v", err, events.ErrMalformed)
	}
	for _, tc := range []struct {
		name   string
		filter string
		follow bool
	}{
		{"scan", holiday, false},
		{"scan across both streams", "astro.events.>", false},
		{"follow", holiday, true},
		{"follow across both streams", "astro.events.>", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			var got []natslog.Message
			err := l.Tail(ctx, tc.filter, events.ScanFrom{}, tc.follow, func(m natslog.Message) error {
				got = append(got, m)
				if len(got) == 4 && tc.follow {
					cancel()
				}
				return nil
			})
			if tc.follow && errors.Is(err, context.Canceled) {
				err = nil
			}
			if err != nil || len(got) != 4 {
				t.Fatalf("tail: %d messages, %v; want 4", len(got), err)
			}
			for i, m := range got {
				if m.Seq != uint64(i+1) || m.Stream != "ASTRO_HISTORY" {
					t.Errorf("message %d: %s seq %d, want ASTRO_HISTORY seq %d", i, m.Stream, m.Seq, i+1)
				}
				if malformed := i == 1; malformed != errors.Is(m.Err, events.ErrMalformed) {
					t.Errorf("message %d: err %v", i, m.Err)
				}
			}
			if bad := got[1]; bad.Subject != holidaySubject("h0") || string(bad.Data) != "garbage" {
				t.Errorf("malformed message shown as %s %q, want it as recorded", bad.Subject, bad.Data)
			}
		})
	}
}

// The server counts a consumer's pending messages as it delivers them,
// and a delete racing the delivery can leave the count one off either
// way: a scan that trusted it stopped one event short, or waited for an
// event that was never to come until its context ended (a read
// overlapping a compaction stalled 30 s). Every scan racing deletes ends
// at the last event (before the fix, each run of this test met both
// within its first rounds).
func TestScansRacingDeletesEnd(t *testing.T) {
	l, _ := openLog(t)
	ctx := t.Context()
	st, err := l.JetStream().Stream(ctx, "ASTRO_INBOXES")
	if err != nil {
		t.Fatal(err)
	}
	for round := range 300 {
		agg := events.Aggregate{Kind: events.KindInbox, ID: fmt.Sprint("u", round)}
		subject := events.Subject("w1", agg)
		var first, last uint64
		for i := range 20 {
			e, err := events.New(fmt.Sprint("e", round, "-", i), meta, agg, events.InboxErased{ErasureID: fmt.Sprint(i)})
			if err != nil {
				t.Fatal(err)
			}
			if last, err = l.Append(ctx, subject, last, e); err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				first = last
			}
		}
		deleted := make(chan error, 1)
		go func() {
			for seq := first; seq < last; seq++ {
				if err := st.DeleteMsg(ctx, seq); err != nil {
					deleted <- err
					return
				}
			}
			deleted <- nil
		}()
		var seen uint64
		scanCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := l.ScanStream(scanCtx, events.KindInbox, events.ScanFrom{Seq: first}, func(e events.Event) error {
			seen = e.Seq
			return nil
		})
		cancel()
		if err := <-deleted; err != nil {
			t.Fatal(err)
		}
		if err != nil || seen != last {
			t.Fatalf("round %d: the scan ended at %d with %v; want it to end at the last event, %d", round, seen, err, last)
		}
	}
}
