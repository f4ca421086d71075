package natslog_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"astro/events"
	"astro/events/natslog"
)

// EraseBeforeKeeping leaves the events of the kept types and removes the
// rest before the cut, on either stream: on the inboxes' a subject purge
// would take the kept events too.
func TestEraseBeforeKeeping(t *testing.T) {
	for _, tc := range []struct {
		name      string
		kind      string
		overwrite bool
	}{
		{"history", events.KindWorkspace, true},
		{"inbox, overwritten", events.KindInbox, true},
		{"inbox, purged", events.KindInbox, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := openLog(t)
			ctx := t.Context()
			agg := events.Aggregate{Kind: tc.kind, ID: "a1"}
			subject := events.Subject("w1", agg)
			kept := events.InboxErased{ErasureID: "x"}
			sent := events.NotificationSent{NotificationID: "n", RecipientID: "a1", SenderID: "s", NotificationType: "t", Subject: "SECRET", CreateDate: time.Now().UTC()}
			var last uint64
			for i, p := range []events.Payload{sent, kept, sent, kept, sent} {
				e, err := events.New(fmt.Sprint("e", i), meta, agg, p)
				if err != nil {
					t.Fatal(err)
				}
				if last, err = l.Append(ctx, subject, last, e); err != nil {
					t.Fatal(err)
				}
			}
			n, err := l.EraseBeforeKeeping(ctx, subject, last, tc.overwrite, []string{kept.EventType()})
			if err != nil {
				t.Fatal(err)
			}
			var left []string
			if _, err := l.Read(ctx, subject, 0, func(e events.Event) error { left = append(left, e.ID); return nil }); err != nil {
				t.Fatal(err)
			}
			if want := []string{"e1", "e3", "e4"}; n != 2 || !slices.Equal(left, want) {
				t.Errorf("removed %d, left %v; want 2 removed, %v left", n, left, want)
			}
		})
	}
}

// The server serves stream and consumer infos from a queue it takes only
// when no other API request waits: an erasure that kept many deletes
// queued starved them, and through a compaction round /readyz and the
// projectors' set-up timed out. An info asked while an erasure runs is
// answered before it ends.
func TestInfosAreAnsweredWhileAnErasureRuns(t *testing.T) {
	l, nc := openLog(t)
	ctx := context.Background()
	subj := holidaySubject("h1")
	const n = 1000
	var last uint64
	for i := range n {
		seq, err := l.Append(ctx, subj, last, renamed(t, fmt.Sprint("e", i), "h1", "a", "b"))
		if err != nil {
			t.Fatal(err)
		}
		last = seq
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, l.StreamFor(subj))
	if err != nil {
		t.Fatal(err)
	}
	first := last - n + 1
	var erased atomic.Bool
	done := make(chan error, 1)
	go func() {
		_, err := l.EraseBefore(ctx, subj, last+1, true)
		erased.Store(true)
		done <- err
	}()
	// Once the first event is gone the erasure is under way.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := st.GetMsg(ctx, first); errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the erasure did not begin")
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := st.Info(ctx); err != nil {
		t.Fatal(err)
	}
	if erased.Load() {
		t.Errorf("a stream info asked while %d events were erased was answered only once they were", n)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Two instances erasing one inbox at once delete the same events: the
// server answers a delete of one already gone with codes the client's
// error carries only as text (10043, 10057), and the second delete failed
// on them, so one of two user erasures answered 500 and a compaction
// racing another failed round after round. Unpark deletes one message by
// its sequence, as they do.
func TestDeletingWhatIsAlreadyDeleted(t *testing.T) {
	l, _ := openLog(t)
	ctx := t.Context()
	for i := range 3 {
		if err := l.Park(ctx, "p1", holidaySubject("h0"), nats.Header{}, []byte("{}"), uint64(i+1), "test"); err != nil {
			t.Fatal(err)
		}
	}
	var parked []natslog.Parked
	if err := l.ListParked(ctx, "p1", func(p natslog.Parked) error { parked = append(parked, p); return nil }); err != nil || len(parked) != 3 {
		t.Fatalf("parked %d, %v", len(parked), err)
	}
	for _, seq := range []uint64{parked[1].ParkSeq, parked[1].ParkSeq, parked[0].ParkSeq, parked[0].ParkSeq} {
		if err := l.Unpark(ctx, seq); err != nil {
			t.Fatalf("unpark %d, gone or not: %v", seq, err)
		}
	}
}

// A parked copy lives as long as its event: erasing what precedes a cut
// (a compaction, a user's erasure) takes the copies of what it erased and
// leaves those of what comes after, which a redrive must still apply.
func TestParkedCopiesGoWithTheirEvents(t *testing.T) {
	l, _ := openLog(t)
	ctx := t.Context()
	h := holidaySubject("h1")
	var seqs []uint64
	for i := range 3 {
		seq, err := l.Append(ctx, h, uint64(len(seqs)), renamed(t, fmt.Sprint("e", i), "h1", "a", "b"))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	for _, seq := range []uint64{seqs[0], seqs[2]} {
		if err := l.Park(ctx, "holidays", h, nats.Header{}, []byte("{}"), seq, "cannot apply"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.EraseBefore(ctx, h, seqs[1], true); err != nil {
		t.Fatal(err)
	}
	if n, err := l.EraseParked(ctx, h); err != nil || n != 1 {
		t.Fatalf("erased %d parked copies (%v), want 1", n, err)
	}
	var left []uint64
	if err := l.ListParked(ctx, "holidays", func(p natslog.Parked) error { left = append(left, p.Seq); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(left, []uint64{seqs[2]}) {
		t.Fatalf("parked copies left of events %v, want the one still in the log, %d", left, seqs[2])
	}
}
