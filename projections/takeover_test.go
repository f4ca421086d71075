package projections_test

import (
	"context"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"astro/events"
	"astro/projections"
	"astro/projections/pgconn"
	"astro/projections/pgtest"
)

// A writer cut off from the database without a reset (a network fault, a
// machine that lost power) loses its lock within lockIdle, and the
// standby takes over; PostgreSQL would otherwise keep the writer's session
// and its lock until TCP gives up, hours later, and no read model moves.
// The writer, still on the log, stops pulling and ends its batch under way
// once its lock's ping goes unanswered: a batch waiting on the cut link
// ends only with its context, and the writer's pulls took the deliveries
// the standby waited for. The cut comes in the middle of a batch, whose
// transaction holds the rows the standby's first batch writes: the server
// ends it as it ends the lock's session, or the standby would wait behind
// it for those hours.
func TestStandbyTakesOverFromAWriterCutOffFromTheDatabase(t *testing.T) {
	f := newFixture(t)
	url := pgtest.URL(t)
	direct, err := sqlx.Open("postgres", url)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	if err := projections.Migrate(context.Background(), direct); err != nil {
		t.Fatal(err)
	}
	link, linked := pgtest.NewFreezer(t, url)
	proxied, err := pgconn.Open(linked) // as the service connects
	if err != nil {
		t.Fatal(err)
	}

	// Deliveries the writer holds come back only after AckWait: ten
	// minutes, so that the standby takes over in time only if the writer
	// stops pulling once its lock is lost, whatever its stuck calls do.
	cfg := projections.RunnerConfig{Batch: 100, AckWait: 10 * time.Minute}
	cut := &freezeMidBatch{Notifications: notificationsProjector(t, proxied), link: link}
	writer, _ := startWith(t, f, proxied, cut, cfg)
	caughtUp(t, writer, f.history(t, 5))
	standby, stopStandby := startWith(t, f, direct, notificationsProjector(t, direct), cfg)
	defer stopStandby()
	caughtUp(t, standby, f.history(t, 5))

	cut.armed.Store(true) // the writer's link to the database goes in its next batch
	cutAt := time.Now()
	more := f.history(t, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = standby.WaitFor(ctx, more)
	var holders int
	_ = direct.Get(&holders, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted`)
	if err != nil {
		t.Fatalf("60 s after the writer lost its database link the standby (state %s) has not taken over: %v; advisory locks still granted: %d",
			standby.State(), err, holders)
	}
	t.Logf("the standby took over after %v", time.Since(cutAt))
}

// freezeMidBatch, once armed, freezes link after its next batch's
// statements, before the commit.
type freezeMidBatch struct {
	*projections.Notifications
	link  *pgtest.Freezer
	armed atomic.Bool
}

func (p *freezeMidBatch) Apply(ctx context.Context, tx *sqlx.Tx, evs []events.Event) error {
	err := p.Notifications.Apply(ctx, tx, evs)
	if err == nil && p.armed.CompareAndSwap(true, false) {
		p.link.Freeze()
	}
	return err
}

// countingHandler counts the records at or above a level.
type countingHandler struct {
	level slog.Level
	n     *atomic.Int32
}

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) WithGroup(string) slog.Handler            { return h }

func (h countingHandler) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Level >= h.level {
		h.n.Add(1)
	}
	return nil
}

func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }

// Through a database outage a runner waiting for its lock backs off and
// says so once: it dialled and wrote a warning every 50 ms, twenty lines
// a second per projector, burying what else the log said.
func TestLockWaitThroughAnOutageLogsOnce(t *testing.T) {
	f := newFixture(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there: every dial is refused
	db, err := sqlx.Open("postgres", "postgres://astro@"+dead+"/astro?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var warnings atomic.Int32
	logger := slog.New(countingHandler{level: slog.LevelWarn, n: &warnings})
	real := pgtest.Open(t)
	if err := projections.Migrate(context.Background(), real); err != nil {
		t.Fatal(err)
	}
	p := notificationsProjector(t, real)
	r, err := projections.NewRunner(f.log.JetStream(), db, p, projections.RunnerConfig{Stream: f.log.StreamFor(p.Subjects()[0]), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if n := warnings.Load(); n == 0 || n > 3 {
		t.Fatalf("%d warnings in 2 s of a refused database, want the first error once", n)
	}
}
