package projections_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/nats-io/nats.go/jetstream"

	"astro/commands"
	"astro/commands/notifications"
	"astro/events"
	"astro/events/natslog"
	"astro/events/natstest"
	"astro/projections"
	"astro/projections/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

type fixture struct {
	log *natslog.Log
	cmd *notifications.Handlers
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	return newFixtureOn(t, natstest.Conn(t), "inbox.test")
}

// history appends a mixed history for a few users and returns the last
// sequence.
func (f fixture) history(t *testing.T, sends int) uint64 {
	t.Helper()
	ctx := context.Background()
	var last uint64
	for i := range sends {
		user := fmt.Sprintf("u%d", i%3)
		c := commands.Caller{UserID: "svc", WorkspaceID: "w1", Scopes: []string{notifications.ScopeSend}}
		sent, res, err := f.cmd.Send.Handle(ctx, notifications.Send{Caller: c, RecipientID: user, SenderID: "0000b0b0-0000-4000-8000-000000000001", NotificationType: "t", Subject: "s", Message: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		last = res.Seq
		owner := commands.Caller{UserID: user, WorkspaceID: "w1"}
		switch i % 7 {
		case 3:
			_, res, err = f.cmd.MarkRead.Handle(ctx, notifications.MarkRead{Caller: owner, NotificationID: sent.NotificationID})
		case 5:
			res, err = f.cmd.Delete.Handle(ctx, notifications.Delete{Caller: owner, NotificationID: sent.NotificationID})
		case 6:
			_, res, err = f.cmd.MarkAllRead.Handle(ctx, notifications.MarkAllRead{Caller: owner})
		}
		if err != nil {
			t.Fatal(err)
		}
		last = max(last, res.Seq)
	}
	res, err := f.cmd.DeleteAll.Handle(ctx, notifications.DeleteAll{Caller: commands.Caller{UserID: "u2", WorkspaceID: "w1"}})
	if err != nil {
		t.Fatal(err)
	}
	return max(last, res.Seq)
}

func migrated(t *testing.T) *sqlx.DB { return migratedB(t) }

func migratedB(t testing.TB) *sqlx.DB {
	t.Helper()
	db := pgtest.Open(t)
	if err := projections.Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	return db
}

// start runs a runner of p until the returned stop is called.
func start(t *testing.T, f fixture, db *sqlx.DB, p projections.Projector, batch int) (*projections.Runner, func()) {
	t.Helper()
	return startWith(t, f, db, p, projections.RunnerConfig{Batch: batch})
}

// startWith is start with cfg; its Stream is set here.
func startWith(t *testing.T, f fixture, db *sqlx.DB, p projections.Projector, cfg projections.RunnerConfig) (*projections.Runner, func()) {
	t.Helper()
	cfg.Stream = f.log.StreamFor(p.Subjects()[0])
	r, err := projections.NewRunner(f.log.JetStream(), db, p, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stop := sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runner: %v", err)
		}
	})
	return r, stop
}

// caughtUp waits until r applied the log up to seq.
func caughtUp(t *testing.T, r *projections.Runner, seq uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.WaitFor(ctx, seq); err != nil {
		t.Fatal(err)
	}
}

func notificationsProjector(t testing.TB, db *sqlx.DB) *projections.Notifications {
	t.Helper()
	p, err := projections.NewNotifications(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// dump is the whole read model, in a canonical order.
func dump(t *testing.T, db *sqlx.DB) string {
	t.Helper()
	var rows []string
	err := db.Select(&rows, `SELECT concat_ws('|', workspace_id, recipient_id, id, sender_id, notification_type, subject, message,
		coalesce(data::text, ''), create_date, coalesce(read_date::text, ''), seq) FROM notifications ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(len(rows), rows)
}

// crashing applies part of a batch inside the transaction, then fails as a
// crash mid-batch would: the transaction must leave nothing behind.
type crashing struct {
	*projections.Notifications
	after   int64 // events applied before the crash
	applied atomic.Int64
}

var errCrash = errors.New("crash mid-batch")

func (c *crashing) Apply(ctx context.Context, tx *sqlx.Tx, evs []events.Event) error {
	for i := range evs {
		if c.applied.Add(1) > c.after {
			return errCrash
		}
		if err := c.Notifications.Apply(ctx, tx, evs[i:i+1]); err != nil {
			return err
		}
	}
	return nil
}

func TestRestartMidBatchEqualsRebuild(t *testing.T) {
	f := newFixture(t)
	last := f.history(t, 120)

	db := migrated(t)
	crash := &crashing{Notifications: notificationsProjector(t, db), after: 70}
	r, stop := start(t, f, db, crash, 50)
	// The runner commits the first full batch, then keeps failing the second.
	waitFor(t, 30*time.Second, func() error {
		if n := crash.applied.Load(); n <= crash.after {
			return fmt.Errorf("the crashing projector applied %d events, not past %d", n, crash.after)
		}
		return nil
	})
	stop()
	if pos := r.Position(); pos == 0 || pos >= last {
		t.Fatalf("crash runner checkpoint %d: want a partial projection below %d", pos, last)
	}
	consumer := consumerInfo(t, f, crash)
	if consumer.Delivered.Stream <= r.Position() {
		t.Fatalf("the crashed runner's consumer delivered up to %d, its checkpoint is %d: the restart has nothing to move back", consumer.Delivered.Stream, r.Position())
	}

	r2, stop2 := start(t, f, db, notificationsProjector(t, db), 50)
	caughtUp(t, r2, last)
	stop2()
	// Moved back, not re-created: in a cluster a new consumer would have
	// to elect its leader before the read model could catch up.
	if again := consumerInfo(t, f, crash); !again.Created.Equal(consumer.Created) {
		t.Errorf("the restart re-created the projector's consumer (created %v, then %v)", consumer.Created, again.Created)
	}

	fresh := migrated(t)
	r3, stop3 := start(t, f, fresh, notificationsProjector(t, fresh), 500)
	caughtUp(t, r3, last)
	stop3()
	if got, want := dump(t, db), dump(t, fresh); got != want {
		t.Fatalf("read model after a crash and restart differs from a rebuild:\n%s\n%s", got, want)
	}

	// Applying the whole log again changes nothing.
	if _, err := db.Exec(`UPDATE projector_checkpoints SET seq = 0`); err != nil {
		t.Fatal(err)
	}
	before := dump(t, db)
	r4, stop4 := start(t, f, db, notificationsProjector(t, db), 7)
	caughtUp(t, r4, last)
	stop4()
	if after := dump(t, db); after != before {
		t.Fatalf("replaying the log changed the read model")
	}
}

// A database restored under a running projector (here from a backup taken
// before the first event) holds an older checkpoint than the runner. The
// runner must not write its next batch on top of the restored tables as if
// they had the events it applied before; it must apply the log again from
// the restored checkpoint, not skip those events as applied. A backup
// taken before the first batch committed has no checkpoint row at all.
func TestDatabaseRestoredUnderTheRunner(t *testing.T) {
	for _, tc := range []struct{ name, checkpoint string }{
		{"at the first event", `UPDATE projector_checkpoints SET seq = 0, event_id = '' WHERE name = $1`},
		{"before the first batch", `DELETE FROM projector_checkpoints WHERE name = $1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			last := f.history(t, 40)
			db := migrated(t)
			p := notificationsProjector(t, db)
			r, stop := start(t, f, db, p, 50)
			t.Cleanup(stop)
			caughtUp(t, r, last)

			tx := db.MustBegin()
			tx.MustExec(tc.checkpoint, p.Name())
			for _, table := range p.Tables() {
				tx.MustExec(`TRUNCATE ` + table)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			last = f.history(t, 5) // written after the restore

			waitFor(t, 30*time.Second, func() error {
				var seq uint64
				if err := db.Get(&seq, `SELECT seq FROM projector_checkpoints WHERE name = $1`, p.Name()); err != nil {
					return err
				}
				if seq != last {
					return fmt.Errorf("checkpoint at %d, the log at %d", seq, last)
				}
				return nil
			})
			stop()
			if got, want := dump(t, db)+counts(t, db), projectedFresh(t, f, last); got != want {
				t.Fatalf("read model after the restore differs from a fresh projection:\n%s\n%s", got, want)
			}
		})
	}
}

func TestStandbyFollowsAndTakesOver(t *testing.T) {
	f := newFixture(t)
	db := migrated(t)
	leader, stopLeader := start(t, f, db, notificationsProjector(t, db), 100)
	caughtUp(t, leader, 0)
	waitFor(t, 10*time.Second, func() error {
		if !leader.Ready() {
			return errors.New("the leader is not ready")
		}
		return nil
	})
	standby, stopStandby := start(t, f, db, notificationsProjector(t, db), 100)
	defer stopStandby()

	first := f.history(t, 10)
	caughtUp(t, standby, first) // the standby follows the leader's checkpoint
	stopLeader()
	second := f.history(t, 10)
	caughtUp(t, standby, second) // and applies on its own once the leader is gone
	var n int
	if err := db.Get(&n, `SELECT count(*) FROM notifications`); err != nil || n == 0 {
		t.Fatalf("read model after takeover: %d rows, %v", n, err)
	}
}

// waitFor polls cond until it returns nil, and fails the test with cond's
// last error once timeout has passed.
func waitFor(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond) // polling, bounded by the deadline
	}
}

// TestConsumerDeletedUnderTheRunner deletes the projector's consumer while
// it runs, as an operator or a node lost with it would: the runner must
// notice, place a new one at its checkpoint and go on, not wait for ever
// on a consumer that is gone.
//
// Starting again, it must take its projector's lock again. The lock is a
// PostgreSQL session's: had the old lock connection gone back to the pool
// with the lock held, the runner would draw another pooled connection,
// find the lock taken by its own old session, and follow its own stalled
// checkpoint for good (a fault suite run: 2 minutes, until it failed).
func TestConsumerDeletedUnderTheRunner(t *testing.T) {
	f := newFixture(t)
	db := migrated(t)
	p := notificationsProjector(t, db)
	r, stop := start(t, f, db, p, 100)
	defer stop()
	caughtUp(t, r, f.history(t, 10))

	ctx := context.Background()
	if err := f.stream(t, p).DeleteConsumer(ctx, "projector_notifications"); err != nil {
		t.Fatal(err)
	}
	// The runner pauses a second before it starts again. Meanwhile, as
	// other queries on a busy service do, connections go back to the pool
	// after the lock's, and the pool hands out the last one returned.
	waitFor(t, 10*time.Second, func() error {
		if r.Ready() {
			return fmt.Errorf("runner still running on its deleted consumer")
		}
		return nil
	})
	returnOthersToThePool(t, db)
	caughtUp(t, r, f.history(t, 10))
	if st := r.State(); st != projections.StateRunning {
		t.Fatalf("runner %s after its restart, want running", st)
	}
}

// returnOthersToThePool gives connections back to db's pool after
// whatever was given back last, as a busy service's queries do; the pool
// hands out the last one returned first.
func returnOthersToThePool(t *testing.T, db *sqlx.DB) {
	t.Helper()
	var conns []*sqlx.Conn
	for range 3 {
		c, err := db.Connx(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Close()
	}
}

// TestLastDeliveryLostIsRedelivered takes the last event from the
// projector's consumer and drops it unacknowledged, as a pull ended by a
// reconnect loses a delivery in flight. No later delivery shows the runner
// a gap, so the log's redelivery after AckWait is what brings the event to
// the read model; with the old minute-long AckWait a read model stayed a
// minute behind after a NATS restart.
func TestLastDeliveryLostIsRedelivered(t *testing.T) {
	f := newFixture(t)
	db := migrated(t)
	p := notificationsProjector(t, db)
	r, stop := startWith(t, f, db, p, projections.RunnerConfig{Batch: 1, AckWait: time.Second})
	defer stop()
	caughtUp(t, r, f.history(t, 5))

	cons, err := f.stream(t, p).Consumer(context.Background(), "projector_notifications")
	if err != nil {
		t.Fatal(err)
	}
	for attempt := 1; ; attempt++ {
		// A pull of our own queues behind the runner's one-event pull: the
		// first event goes to the runner, whose next pull queues behind
		// ours, so the second, the last, comes to us.
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		f.send(t)
		last := f.send(t)
		var took uint64
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			took = meta.Sequence.Stream
		}
		caughtUp(t, r, last)
		if took == last {
			t.Logf("took the last event, %d, from the runner at attempt %d, and left it unacknowledged", took, attempt)
			return
		}
		if attempt == 20 {
			t.Fatalf("the last event never came to our pull in %d attempts", attempt)
		}
	}
}

// send appends one notification and returns its sequence.
func (f fixture) send(t *testing.T) uint64 {
	t.Helper()
	c := commands.Caller{UserID: "svc", WorkspaceID: "w1", Scopes: []string{notifications.ScopeSend}}
	_, res, err := f.cmd.Send.Handle(context.Background(), notifications.Send{Caller: c, RecipientID: "u0", SenderID: "0000b0b0-0000-4000-8000-000000000001", NotificationType: "t", Subject: "s", Message: "m"})
	if err != nil {
		t.Fatal(err)
	}
	return res.Seq
}

// TestConsumerThatStartsAfterTheCheckpointIsRecreated: a consumer cannot
// be moved back before the sequence it was made to start at (a database
// restored to an older checkpoint than the consumer's start): the runner
// makes it again, at the checkpoint, and applies every event.
func TestConsumerThatStartsAfterTheCheckpointIsRecreated(t *testing.T) {
	f := newFixture(t)
	last := f.history(t, 60)
	db := migrated(t)
	p := notificationsProjector(t, db)
	old, err := f.stream(t, p).CreateOrUpdateConsumer(context.Background(), jetstream.ConsumerConfig{
		Durable: "projector_" + p.Name(), FilterSubjects: p.Subjects(), AckPolicy: jetstream.AckAllPolicy,
		AckWait: 10 * time.Second, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: last / 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Delivered past the checkpoint (none): the runner must move it back.
	if _, err := old.Fetch(1); err != nil {
		t.Fatal(err)
	}

	r, stop := startWith(t, f, db, p, projections.RunnerConfig{Batch: 50, AckWait: 10 * time.Second})
	defer stop()
	caughtUp(t, r, last)
	stop()
	if again := consumerInfo(t, f, p); again.Created.Equal(old.CachedInfo().Created) || again.Config.OptStartSeq != 0 {
		t.Errorf("consumer kept (created %v, start %d): it cannot deliver the events before %d", again.Created, again.Config.OptStartSeq, last/2)
	}
	if got, want := dump(t, db)+counts(t, db), projectedFresh(t, f, last); got != want {
		t.Fatalf("read model differs from a fresh projection:\n%s\n%s", got, want)
	}
}

// narrowHolidays is the holidays projector as a release that did not yet
// read workspace events had it.
type narrowHolidays struct{ *projections.Holidays }

func (narrowHolidays) Subjects() []string {
	return []string{events.KindSubjects(events.KindHoliday), events.KindSubjects(events.KindResource)}
}

// TestConsumerWithOtherSubjectsIsRecreated: a projector that now reads
// another kind of event must get that kind's events from its checkpoint
// on. The durable consumer an earlier release left filters the old
// subjects; kept, it would skip the new kind's events for good.
func TestConsumerWithOtherSubjectsIsRecreated(t *testing.T) {
	f := newFixture(t)
	db := migrated(t)
	ctx := context.Background()
	p, err := projections.NewHolidays(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	appendEvent := func(agg events.Aggregate, pl events.Payload) uint64 {
		t.Helper()
		n++
		e, err := events.New(fmt.Sprint("e", n), events.Meta{WorkspaceID: "w1", ActorID: "u1", Time: time.Now()}, agg, pl)
		if err != nil {
			t.Fatal(err)
		}
		seq, err := f.log.Append(ctx, events.Subject("w1", agg), 0, e)
		if err != nil {
			t.Fatal(err)
		}
		return seq
	}
	create := func(id string) uint64 {
		return appendEvent(events.Aggregate{Kind: events.KindHoliday, ID: id},
			events.HolidayCreated{HolidayID: id, Reason: "r", Type: "global", DateFrom: "2027-01-01", DateTo: "2027-01-01"})
	}
	h1, h2 := "00000000-0000-4000-8000-0000000000a1", "00000000-0000-4000-8000-0000000000a2"

	old, stop := start(t, f, db, narrowHolidays{p}, 10)
	caughtUp(t, old, create(h1))
	stop()

	r, stop := start(t, f, db, p, 10)
	defer stop()
	appendEvent(events.Aggregate{Kind: events.KindWorkspace, ID: "w1"}, events.WorkspaceErased{ErasureID: "x"})
	caughtUp(t, r, create(h2))
	var left []string
	if err := db.Select(&left, `SELECT id::text FROM holidays WHERE workspace_id = 'w1' ORDER BY id`); err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0] != h2 {
		t.Errorf("holidays after the workspace's erasure and a new one: %v, want only %s", left, h2)
	}
	if got := consumerInfo(t, f, p).Config.FilterSubjects; !slices.Equal(got, p.Subjects()) {
		t.Errorf("consumer filters %v, want %v", got, p.Subjects())
	}
}

// consumerInfo is the durable consumer of p's runner, as the log has it now.
func consumerInfo(t *testing.T, f fixture, p projections.Projector) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := f.stream(t, p).Consumer(context.Background(), "projector_"+p.Name())
	if err != nil {
		t.Fatal(err)
	}
	return c.CachedInfo()
}

// stream is the event stream p's runner consumes.
func (f fixture) stream(t *testing.T, p projections.Projector) jetstream.Stream {
	t.Helper()
	st, err := f.log.JetStream().Stream(context.Background(), f.log.StreamFor(p.Subjects()[0]))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestAStandbyIsNotReadyOnAReadModelTheLogDoesNotHold: the log lost the
// tail the read model applied (restored from an older backup). The
// writing instance finds out when it starts, and rebuilds, not ready; a
// standby answered ready all the while, from a read model with events the
// log no longer has, and its reads waited for nothing.
func TestAStandbyIsNotReadyOnAReadModelTheLogDoesNotHold(t *testing.T) {
	f := newFixture(t)
	last := f.history(t, 5)
	db := migrated(t)
	p := notificationsProjector(t, db)
	writer, stopWriter := start(t, f, db, p, 50)
	defer stopWriter()
	caughtUp(t, writer, last)
	standby, stopStandby := start(t, f, db, notificationsProjector(t, db), 50)
	defer stopStandby()
	waitFor(t, 10*time.Second, func() error {
		if !standby.Ready() || standby.State() != projections.StateStandby {
			return fmt.Errorf("the standby is %s, ready %v", standby.State(), standby.Ready())
		}
		return nil
	})

	db.MustExec(`UPDATE projector_checkpoints SET seq = $2 WHERE name = $1`, p.Name(), last+100) // past the log's end
	waitFor(t, 10*time.Second, func() error {
		if standby.Ready() || standby.State() != projections.StateDiverged {
			return fmt.Errorf("the standby is %s, ready %v, on a checkpoint past the log's end", standby.State(), standby.Ready())
		}
		return nil
	})
	db.MustExec(`UPDATE projector_checkpoints SET seq = $2 WHERE name = $1`, p.Name(), last) // the writer's rebuild, done
	waitFor(t, 10*time.Second, func() error {
		if !standby.Ready() || standby.State() != projections.StateStandby {
			return fmt.Errorf("the standby is %s, ready %v, once the read model is the log's again", standby.State(), standby.Ready())
		}
		return nil
	})
}
