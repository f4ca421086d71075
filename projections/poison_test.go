package projections_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/nats-io/nats.go"

	"astro/events"
	"astro/events/natslog"
	"astro/projections"
)

// picky refuses one event until it is "fixed", as a projector with a bug
// would, then applies it.
type picky struct {
	*projections.Notifications
	refuse atomic.Uint64 // seq to refuse; 0 when fixed
}

func (p *picky) Apply(ctx context.Context, tx *sqlx.Tx, evs []events.Event) error {
	for _, e := range evs {
		if e.Seq == p.refuse.Load() {
			return errors.Join(projections.ErrUnappliable, errors.New("a bug"))
		}
	}
	return p.Notifications.Apply(ctx, tx, evs)
}

func TestPoisonEventsAreParkedAndRedriven(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	nc := f.log.JetStream().Conn()
	publish := func(m *nats.Msg) {
		t.Helper()
		if _, err := f.log.JetStream().PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	f.history(t, 3)
	// Not an event at all (no CloudEvents headers), then a type this build
	// does not know, on an aggregate of their own: the write side refuses to
	// decide on a history it cannot read.
	junk := nats.NewMsg("astro.events.w1.inbox.u9")
	junk.Data = []byte("garbage")
	publish(junk)
	e, _ := events.New("odd-1", events.Meta{WorkspaceID: "w1", Time: time.Now()}, events.Aggregate{Kind: events.KindInbox, ID: "u9"},
		events.NotificationUnread{NotificationID: "x", RecipientID: "u9"})
	unknown := natslog.Encode(e)
	unknown.Header.Set("ce-type", "NotificationTeleported")
	publish(unknown)
	buggy := f.history(t, 3) // its last event will hit the "bug"
	last := f.history(t, 3)

	db := migrated(t)
	p := &picky{Notifications: notificationsProjector(t, db)}
	p.refuse.Store(buggy)
	r, err := projections.NewRunner(f.log.JetStream(), db, p, projections.RunnerConfig{Stream: f.log.StreamFor(p.Subjects()[0]), Parking: f.log})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	defer func() { cancel(); <-done }()

	caughtUp(t, r, last) // poison does not stop the projector
	if got := r.Parked(); got != 3 {
		t.Fatalf("parked %d events, want 3", got)
	}
	var reasons []string
	if err := f.log.ListParked(ctx, "notifications", func(p natslog.Parked) error {
		reasons = append(reasons, p.Reason)
		return nil
	}); err != nil || len(reasons) != 3 {
		t.Fatalf("listed %d parked events (%v): %v", len(reasons), err, reasons)
	}

	// The buggy event parked a second time, past the log's duplicate window
	// (a batch retried while the database was down longer): a copy under
	// another message id.
	var again *nats.Msg
	f.log.ListParked(ctx, "notifications", func(p natslog.Parked) error {
		if p.Seq == buggy {
			again = nats.NewMsg(natslog.ParkedSubject("notifications"))
			again.Header, again.Data = p.Header, p.Data
			again.Header.Set(nats.MsgIdHdr, "parked again")
		}
		return nil
	})
	publish(again)

	// After the fix, a redrive applies what can be applied now, once.
	p.refuse.Store(0)
	resp, err := nc.Request(projections.RedriveSubject("notifications"), nil, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(resp.Data); got != `{"projector":"notifications","applied":1,"parked":2}` {
		t.Fatalf("redrive answered %s", got)
	}
	left := 0
	f.log.ListParked(ctx, "notifications", func(natslog.Parked) error { left++; return nil })
	if left != 2 {
		t.Fatalf("%d still parked after the redrive, want the 2 that are not events", left)
	}
}
