package projections_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/nats-io/nats.go"

	"astro/commands"
	"astro/commands/holidays"
	"astro/commands/notifications"
	"astro/events"
	"astro/events/natslog"
	"astro/events/natstest"
	"astro/projections"
)

// picky refuses some events until it is "fixed", as a projector with a bug
// would, then applies them.
type picky struct {
	projections.Model
	mu     sync.Mutex
	refuse map[uint64]bool // seqs to refuse
}

// refuseOnly makes p refuse the events at seqs, and only them.
func (p *picky) refuseOnly(seqs ...uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = map[uint64]bool{}
	for _, seq := range seqs {
		p.refuse[seq] = true
	}
}

func (p *picky) Apply(ctx context.Context, tx *sqlx.Tx, evs []events.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range evs {
		if p.refuse[e.Seq] {
			return errors.Join(projections.ErrUnappliable, errors.New("a bug"))
		}
	}
	return p.Model.Apply(ctx, tx, evs)
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
	p := &picky{Model: notificationsProjector(t, db)}
	p.refuseOnly(buggy)
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
	p.refuseOnly()
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

// TestRedriveKeepsWhatCameAfter: a parked event's inbox went on without it
// (the notification deleted, or read); a redrive puts it where the log has
// it, before them, and the read model is then what a projector that never
// refused it builds. Every instance is told to forget what it remembered
// of the read model.
func TestRedriveKeepsWhatCameAfter(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	svc := commands.Caller{UserID: "svc", WorkspaceID: "w1", Scopes: []string{notifications.ScopeSend}}
	owner := commands.Caller{UserID: "u1", WorkspaceID: "w1"}
	send := func() (string, uint64) {
		t.Helper()
		sent, res, err := f.cmd.Send.Handle(ctx, notifications.Send{Caller: svc, RecipientID: "u1",
			SenderID: "0000b0b0-0000-4000-8000-000000000001", NotificationType: "t", Subject: "s", Message: "m"})
		if err != nil {
			t.Fatal(err)
		}
		return sent.NotificationID, res.Seq
	}
	deleted, deletedAt := send()
	if _, err := f.cmd.Delete.Handle(ctx, notifications.Delete{Caller: owner, NotificationID: deleted}); err != nil {
		t.Fatal(err)
	}
	read, readAt := send()
	if _, _, err := f.cmd.MarkRead.Handle(ctx, notifications.MarkRead{Caller: owner, NotificationID: read}); err != nil {
		t.Fatal(err)
	}
	_, last := send()

	nc := f.log.JetStream().Conn()
	redriven, err := nc.SubscribeSync(projections.RedrivenSubject("notifications"))
	if err != nil {
		t.Fatal(err)
	}
	db := migrated(t)
	p := &picky{Model: notificationsProjector(t, db)}
	p.refuseOnly(deletedAt, readAt)
	r, stop := startWith(t, f, db, p, projections.RunnerConfig{Parking: f.log})
	caughtUp(t, r, last)
	if got := r.Parked(); got != 2 {
		t.Fatalf("parked %d events, want 2", got)
	}

	p.refuseOnly()
	resp, err := nc.Request(projections.RedriveSubject("notifications"), nil, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(resp.Data); got != `{"projector":"notifications","applied":2,"parked":0}` {
		t.Fatalf("redrive answered %s", got)
	}
	if _, err := redriven.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("no word of the redrive: %v", err)
	}
	stop() // the runners of both read models share the log's consumer
	if got, want := dump(t, db)+counts(t, db), projectedClean(t, f, last); got != want {
		t.Errorf("after the redrive the read model is\n%s\nwant\n%s", got, want)
	}
}

// TestRedriveOfARunnerThatLostItsPlace: a runner whose checkpoint another
// moved (it lost its lock, and the one that took over applied the log
// since) redrives nothing: what it would apply after the parked event
// stops where it left the log, and could bring back what came since.
func TestRedriveOfARunnerThatLostItsPlace(t *testing.T) {
	f := newFixture(t)
	last := f.history(t, 3)
	db := migrated(t)
	p := &picky{Model: notificationsProjector(t, db)}
	p.refuseOnly(last)
	r, stop := startWith(t, f, db, p, projections.RunnerConfig{Parking: f.log})
	defer stop()
	caughtUp(t, r, last)
	before := dump(t, db) + counts(t, db)

	p.refuseOnly()
	db.MustExec(`UPDATE projector_checkpoints SET seq = seq + 1 WHERE name = $1`, p.Name())
	resp, err := f.log.JetStream().Conn().Request(projections.RedriveSubject("notifications"), nil, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var res projections.RedriveResult
	if err := json.Unmarshal(resp.Data, &res); err != nil {
		t.Fatal(err)
	}
	if res.Applied != 0 || res.Parked != 1 || !strings.Contains(res.Error, "not where this writer left it") {
		t.Fatalf("redrive answered %s, want nothing applied and the checkpoint named", resp.Data)
	}
	if after := dump(t, db) + counts(t, db); after != before {
		t.Fatalf("the refused redrive changed the read model:\n%s\nwas\n%s", after, before)
	}
}

// projectedClean is the read model (dump and counts) that a projector that
// refuses nothing makes of f's log up to last. No other runner of the
// notifications projector may run: they share the log's consumer.
func projectedClean(t *testing.T, f fixture, last uint64) string {
	t.Helper()
	db := migrated(t)
	r, stop := start(t, f, db, notificationsProjector(t, db), 0)
	defer stop()
	caughtUp(t, r, last)
	return dump(t, db) + counts(t, db)
}

// TestParkedEventsAreRedrivenAtStart: what one build parked (a type it
// does not know, appended by a newer one in a rolling deploy) is applied
// when a build that can apply it takes the projector over.
func TestParkedEventsAreRedrivenAtStart(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	last := f.history(t, 3)
	db := migrated(t)
	p := &picky{Model: notificationsProjector(t, db)}
	p.refuseOnly(last)
	r, stop := startWith(t, f, db, p, projections.RunnerConfig{Parking: f.log})
	caughtUp(t, r, last)
	if got := r.Parked(); got != 1 {
		t.Fatalf("parked %d events, want 1", got)
	}
	stop()

	r, stop = startWith(t, f, db, notificationsProjector(t, db), projections.RunnerConfig{Parking: f.log})
	caughtUp(t, r, last)
	waitFor(t, 30*time.Second, func() error {
		left := 0
		if err := f.log.ListParked(ctx, "notifications", func(natslog.Parked) error { left++; return nil }); err != nil {
			return err
		}
		if left != 0 {
			return fmt.Errorf("%d still parked", left)
		}
		return nil
	})
	stop()
	if got, want := dump(t, db)+counts(t, db), projectedClean(t, f, last); got != want {
		t.Errorf("after the start the read model is\n%s\nwant\n%s", got, want)
	}
}

// TestRedriveOfAWorkspaceErasure: an erasure reaches every holiday of its
// workspace. Redriven, it erases those created before it and keeps those
// created after; a holiday's creation redriven after the erasure (one cut
// short, the event still in the log) stays erased. Both as a projector
// that never refused them makes it.
func TestRedriveOfAWorkspaceErasure(t *testing.T) {
	for _, tc := range []struct {
		name   string
		refuse func(before, erasure uint64) uint64
	}{
		{"the erasure parked", func(_, erasure uint64) uint64 { return erasure }},
		{"a creation before it parked", func(before, _ uint64) uint64 { return before }},
	} {
		t.Run(tc.name, func(t *testing.T) { redriveAroundAnErasure(t, tc.refuse) })
	}
}

func redriveAroundAnErasure(t *testing.T, refuse func(before, erasure uint64) uint64) {
	ctx := context.Background()
	l, err := natslog.Open(ctx, natstest.Conn(t), natslog.Config{})
	if err != nil {
		t.Fatal(err)
	}
	hs, err := commands.NewStore(l, l.Snapshots(), holidays.NewHoliday, commands.StoreConfig{Name: "holidays.test"})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := commands.NewStore(l, l.Snapshots(), holidays.NewResource, commands.StoreConfig{Name: "resources.test"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := holidays.NewHandlers(hs, rs, func(string) bool { return true }, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	c := commands.Caller{UserID: "u1", WorkspaceID: "w1"}
	create := func(reason string) uint64 {
		t.Helper()
		_, _, res, err := h.Create.Handle(ctx, holidays.Create{Caller: c, Reason: &reason, Type: "global", DateFrom: "2027-01-01", DateTo: "2027-01-01"})
		if err != nil {
			t.Fatal(err)
		}
		return res.Seq
	}
	before := create("before the erasure")
	ws := events.Aggregate{Kind: events.KindWorkspace, ID: "w1"}
	e, err := events.New("erasure-1", c.Meta(time.Now()), ws, events.WorkspaceErased{ErasureID: "erasure-1"})
	if err != nil {
		t.Fatal(err)
	}
	erasedAt, err := l.Append(ctx, events.Subject("w1", ws), 0, e)
	if err != nil {
		t.Fatal(err)
	}
	last := create("after the erasure")

	reasons := func(db *sqlx.DB) string {
		t.Helper()
		var rows []string
		if err := db.Select(&rows, `SELECT reason FROM holidays ORDER BY seq`); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(rows)
	}
	f := fixture{log: l}
	db := migrated(t)
	hp, err := projections.NewHolidays(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	p := &picky{Model: hp}
	p.refuseOnly(refuse(before, erasedAt))
	r, stop := startWith(t, f, db, p, projections.RunnerConfig{Parking: l})
	caughtUp(t, r, last)
	p.refuseOnly()
	resp, err := l.JetStream().Conn().Request(projections.RedriveSubject("holidays"), nil, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(resp.Data); got != `{"projector":"holidays","applied":1,"parked":0}` {
		t.Fatalf("redrive answered %s", got)
	}
	stop()

	clean := migrated(t)
	cp, err := projections.NewHolidays(ctx, clean)
	if err != nil {
		t.Fatal(err)
	}
	cr, _ := start(t, f, clean, cp, 0)
	caughtUp(t, cr, last)
	if got, want := reasons(db), reasons(clean); got != want || want != "[after the erasure]" {
		t.Errorf("after the redrive the holidays are %s, want %s, and [after the erasure]", got, want)
	}
}
