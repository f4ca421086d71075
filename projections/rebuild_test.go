package projections_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/nats-io/nats.go"

	"astro/commands"
	"astro/commands/notifications"
	"astro/events"
	"astro/events/natslog"
	"astro/projections"
	"astro/query"
)

// projectedFresh is the notifications read model a fresh database gets
// from the whole log: what every rebuild must equal. Its runner uses the
// projector's durable consumer: no other runner of it may run meanwhile.
func projectedFresh(t *testing.T, f fixture, last uint64) string {
	t.Helper()
	fresh := migrated(t)
	r, stop := start(t, f, fresh, notificationsProjector(t, fresh), 500)
	caughtUp(t, r, last)
	stop()
	return dump(t, fresh) + counts(t, fresh)
}

// counts is the notification_counts table, in a canonical order.
func counts(t *testing.T, db *sqlx.DB) string {
	t.Helper()
	var rows []string
	if err := db.Select(&rows, `SELECT concat_ws('|', workspace_id, recipient_id, total, unread, seq) FROM notification_counts ORDER BY 1`); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(rows)
}

func rebuild(t *testing.T, f fixture, db *sqlx.DB, cfg projections.RebuildConfig) (projections.RebuildResult, error) {
	t.Helper()
	cfg.Stream = f.log.Stream(events.KindInbox)
	return projections.Rebuild(context.Background(), f.log.JetStream(), db, notificationsProjector(t, db), cfg)
}

func schemas(t *testing.T, db *sqlx.DB) []string {
	t.Helper()
	var names []string
	if err := db.Select(&names, `SELECT nspname FROM pg_namespace WHERE nspname LIKE 'rebuild_%' OR nspname LIKE 'retired_%' ORDER BY 1`); err != nil {
		t.Fatal(err)
	}
	return names
}

func TestRebuildBesideTheLiveModelSwitchesWhenTheyAgree(t *testing.T) {
	f := newFixture(t)
	db := migrated(t)
	ctx := context.Background()
	// Queries prepared before the switch must read the new tables after it.
	q, err := query.NewNotifications(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	live, stop := start(t, f, db, notificationsProjector(t, db), 50)
	defer stop()
	caughtUp(t, live, f.history(t, 150))

	var mu sync.Mutex
	var seen []projections.Progress
	done := make(chan struct{})
	var res projections.RebuildResult
	var rerr error
	go func() {
		defer close(done)
		res, rerr = rebuild(t, f, db, projections.RebuildConfig{Batch: 20, ProgressEvery: time.Nanosecond, Progress: func(p projections.Progress) {
			mu.Lock()
			seen = append(seen, p)
			mu.Unlock()
		}})
	}()
	last := f.history(t, 40) // the live model keeps following meanwhile
	<-done
	if rerr != nil {
		t.Fatal(rerr)
	}
	if !res.Switched || len(res.Diffs) > 0 || res.Applied == 0 || res.Position == 0 {
		t.Fatalf("rebuild: %+v", res)
	}
	mu.Lock()
	if len(seen) < 2 || seen[len(seen)-1].Phase != "switched" || seen[0].Phase != "building" {
		t.Fatalf("progress reports: %+v", seen)
	}
	mu.Unlock()
	if left := schemas(t, db); len(left) > 0 {
		t.Fatalf("schemas left after the switch: %v", left)
	}
	var version int
	if err := db.Get(&version, `SELECT version FROM projector_checkpoints WHERE name = 'notifications'`); err != nil || version != (&projections.Notifications{}).Version() {
		t.Fatalf("checkpoint version %d, %v", version, err)
	}

	// The live runner goes on applying, into the new tables.
	last = max(last, f.history(t, 20))
	caughtUp(t, live, last)
	stop() // the fresh projection takes over the projector's consumer
	if got, want := dump(t, db)+counts(t, db), projectedFresh(t, f, last); got != want {
		t.Fatalf("read model after the switch differs from a fresh projection:\n%s\n%s", got, want)
	}
	c, err := q.Counts(ctx, "w1", "u0", 0, 0)
	var total int
	if err2 := db.Get(&total, `SELECT count(*) FROM notifications WHERE workspace_id = 'w1' AND recipient_id = 'u0'`); err != nil || err2 != nil || c.Total != total {
		t.Fatalf("query prepared before the switch: %+v (%v), table holds %d (%v)", c, err, total, err2)
	}
}

// Events written after the rebuild read the log's end, while it indexes
// its tables, must be in the new read model when it switches. The last
// event read said nothing was left after it, which was true when it was
// sent.
func TestRebuildTakesWhatWasWrittenAfterItReachedTheEnd(t *testing.T) {
	f := newFixture(t)
	db := migrated(t)
	live, stop := start(t, f, db, notificationsProjector(t, db), 50)
	defer stop()
	caughtUp(t, live, f.history(t, 60))

	var last uint64
	res, err := rebuild(t, f, db, projections.RebuildConfig{Batch: 20, Progress: func(p projections.Progress) {
		if p.Phase == "indexing" && last == 0 {
			last = f.history(t, 10)
			caughtUp(t, live, last)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if last == 0 {
		t.Fatal("the rebuild reported no indexing phase")
	}
	if !res.Switched || len(res.Diffs) > 0 || res.Position != last {
		t.Fatalf("rebuild: %+v; want switched at %d without differences", res, last)
	}
	stop() // the fresh projection takes over the projector's consumer
	if got, want := dump(t, db)+counts(t, db), projectedFresh(t, f, last); got != want {
		t.Fatalf("read model after the switch differs from a fresh projection:\n%s\n%s", got, want)
	}
}

// Events the live projector applies one at a time after the rebuild's last
// catch-up, before the switch holds the live tables, are each delivered to
// the rebuild with none counted after them. The switch must apply all of
// them: short of the live checkpoint, the comparison finds differences that
// are not there, and a forced switch (every version upgrade) moves the
// checkpoint past events the new tables never got.
func TestSwitchTakesEveryEventUpToTheLiveCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name  string
		force bool
	}{
		{"compared", false},
		{"forced", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			db := migrated(t)
			live, stop := start(t, f, db, notificationsProjector(t, db), 50)
			defer stop()
			caughtUp(t, live, f.history(t, 30))

			var last uint64
			indexed, trickled := false, false
			res, err := rebuild(t, f, db, projections.RebuildConfig{Batch: 20, Force: tc.force, Progress: func(p projections.Progress) {
				switch {
				case p.Phase == "indexing" && !indexed:
					// The catch-up after indexing applies this one and
					// reports it: the rebuild then goes to the switch.
					indexed = true
					last = f.send(t)
					caughtUp(t, live, last)
				case p.Phase == "building" && indexed && p.Position == last:
					for range 3 {
						last = f.send(t)
						caughtUp(t, live, last)
						deliveredToTheRebuild(t, f, last)
					}
					trickled = true
				}
			}})
			if !trickled {
				t.Fatal("the rebuild reported no catch-up after indexing")
			}
			if err != nil {
				t.Fatalf("rebuild: %v; differences %+v", err, res.Diffs)
			}
			if !res.Switched || res.Position != last || (!tc.force && len(res.Diffs) > 0) {
				t.Fatalf("rebuild: %+v; want switched at %d", res, last)
			}
			stop() // the fresh projection takes over the projector's consumer
			if got, want := dump(t, db)+counts(t, db), projectedFresh(t, f, last); got != want {
				t.Fatalf("read model after the switch differs from a fresh projection:\n%s\n%s", got, want)
			}
		})
	}
}

// A switch that gives up waiting for the live tables (a long read holds
// one past the switch's lock_timeout) has applied its last events in the
// transaction it rolls back: the next attempt must apply them again, from
// where the new read model was before. Taken as applied, they would be
// missing from the tables it switches in, and counted twice.
func TestSwitchThatGivesUpAppliesItsEventsAgain(t *testing.T) {
	f := newFixture(t)
	db := migrated(t)
	live, stop := start(t, f, db, notificationsProjector(t, db), 50)
	defer stop()
	caughtUp(t, live, f.history(t, 30))

	var reader *sqlx.Tx
	t.Cleanup(func() {
		if reader != nil {
			reader.Rollback()
		}
	})
	var last uint64
	indexed, trickled, compared := false, false, 0
	res, err := rebuild(t, f, db, projections.RebuildConfig{Batch: 20, Progress: func(p projections.Progress) {
		switch {
		case p.Phase == "indexing" && !indexed:
			indexed = true
			last = f.send(t)
			caughtUp(t, live, last)
		case p.Phase == "building" && indexed && !trickled && p.Position == last:
			// Events the switch's own batch applies, not a catch-up's.
			for range 3 {
				last = f.send(t)
				caughtUp(t, live, last)
				deliveredToTheRebuild(t, f, last)
			}
			trickled = true
		case p.Phase == "comparing":
			compared++
			if compared == 1 {
				// A read of a live table: the switch may not move it
				// while this transaction lasts.
				var err error
				if reader, err = db.Beginx(); err != nil {
					t.Fatal(err)
				}
				if _, err := reader.Exec(`SELECT count(*) FROM notifications`); err != nil {
					t.Fatal(err)
				}
				return
			}
			if reader != nil {
				if err := reader.Rollback(); err != nil {
					t.Fatal(err)
				}
				reader = nil
			}
		}
	}})
	if !trickled || compared < 2 {
		t.Fatalf("the rebuild trickled %v, compared %d times; want a switch that gave up and one that did not", trickled, compared)
	}
	if err != nil {
		t.Fatalf("rebuild: %v; differences %+v", err, res.Diffs)
	}
	if !res.Switched || res.Position != last || len(res.Diffs) > 0 || res.Applied != int64(last) {
		t.Fatalf("rebuild: %+v; want switched at %d without differences, having applied %d events", res, last, last)
	}
	stop() // the fresh projection takes over the projector's consumer
	if got, want := dump(t, db)+counts(t, db), projectedFresh(t, f, last); got != want {
		t.Fatalf("read model after the switch differs from a fresh projection:\n%s\n%s", got, want)
	}
}

// deliveredToTheRebuild waits until the log has delivered the event at seq
// to the rebuild's consumer, so that the next event is delivered on its own.
func deliveredToTheRebuild(t *testing.T, f fixture, seq uint64) {
	t.Helper()
	st, err := f.log.JetStream().Stream(context.Background(), f.log.Stream(events.KindInbox))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() error {
		infos := st.ListConsumers(context.Background())
		for info := range infos.Info() {
			if strings.HasPrefix(info.Config.Description, "rebuild of") && info.Delivered.Stream >= seq {
				return nil
			}
		}
		if err := infos.Err(); err != nil {
			return err
		}
		return fmt.Errorf("event %d not delivered to the rebuild", seq)
	})
}

// TestRebuildAgainInTheSameProcess: a rebuild's lock is its session's, so
// a finished rebuild must end that session. Given back to the pool with
// the lock, it would make the next rebuild of the process, on another
// pooled connection, find one running.
func TestRebuildAgainInTheSameProcess(t *testing.T) {
	f := newFixture(t)
	db := migrated(t)
	live, stop := start(t, f, db, notificationsProjector(t, db), 50)
	defer stop()
	caughtUp(t, live, f.history(t, 20))
	if _, err := rebuild(t, f, db, projections.RebuildConfig{Batch: 20}); err != nil {
		t.Fatal(err)
	}
	// Other queries give connections back to the pool after the rebuild's.
	returnOthersToThePool(t, db)
	if _, err := rebuild(t, f, db, projections.RebuildConfig{Batch: 20}); err != nil {
		t.Fatalf("a second rebuild: %v", err)
	}
}

func TestRebuildThatDisagreesSwitchesOnlyWhenForced(t *testing.T) {
	f := newFixture(t)
	db := migrated(t)
	live, stop := start(t, f, db, notificationsProjector(t, db), 50)
	last := f.history(t, 60)
	caughtUp(t, live, last)
	stop()
	// A read model gone wrong: a row altered by hand, a count off by one.
	if _, err := db.Exec(`UPDATE notifications SET subject = 'tampered' WHERE seq = (SELECT min(seq) FROM notifications)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE notification_counts SET unread = unread + 1 WHERE recipient_id = 'u1'`); err != nil {
		t.Fatal(err)
	}
	tampered := dump(t, db) + counts(t, db)

	res, err := rebuild(t, f, db, projections.RebuildConfig{})
	if !errors.Is(err, projections.ErrDisagree) || res.Switched {
		t.Fatalf("rebuild of a read model that differs: %+v, %v", res, err)
	}
	want := map[string]int64{"notifications/live": 1, "notifications/rebuilt": 1, "notification_counts/live": 1, "notification_counts/rebuilt": 1}
	for _, d := range res.Diffs {
		if want[d.Table+"/"+d.Side] != d.Rows || len(d.Sample) != int(d.Rows) {
			t.Errorf("difference %+v", d)
		}
		delete(want, d.Table+"/"+d.Side)
	}
	if len(want) > 0 || !strings.Contains(fmt.Sprint(res.Diffs), "tampered") {
		t.Fatalf("differences %+v, missing %v", res.Diffs, want)
	}
	if got := dump(t, db) + counts(t, db); got != tampered {
		t.Fatal("a rebuild that disagrees changed the live read model")
	}

	// Forced, it switches to the read model it kept, without building again.
	res, err = rebuild(t, f, db, projections.RebuildConfig{Force: true})
	if err != nil || !res.Switched || res.ResumedFrom == 0 || res.Applied != 0 || len(res.Diffs) != 4 {
		t.Fatalf("forced rebuild: %+v, %v", res, err)
	}
	if got, want := dump(t, db)+counts(t, db), projectedFresh(t, f, last); got != want {
		t.Fatalf("forced rebuild differs from a fresh projection:\n%s\n%s", got, want)
	}
}

func TestRebuildResumesAfterACrash(t *testing.T) {
	f := newFixture(t)
	db := migrated(t)
	live, stop := start(t, f, db, notificationsProjector(t, db), 50)
	caughtUp(t, live, f.history(t, 100))
	stop()
	last := f.history(t, 20) // not yet in the live model: no projector runs
	ctx, crash := context.WithCancel(context.Background())
	_, err := projections.Rebuild(ctx, f.log.JetStream(), db, notificationsProjector(t, db), projections.RebuildConfig{
		Stream: f.log.Stream(events.KindInbox), Batch: 10, ProgressEvery: time.Nanosecond,
		Progress: func(p projections.Progress) {
			if p.Applied >= 30 {
				crash()
			}
		}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted rebuild: %v", err)
	}
	var at uint64
	if err := db.Get(&at, `SELECT seq FROM rebuild_notifications.projector_checkpoints WHERE name = 'notifications'`); err != nil || at == 0 {
		t.Fatalf("the interrupted rebuild's checkpoint: %d, %v", at, err)
	}
	// A second rebuild of the same read model waits its turn or says so.
	lease, err := db.Connx(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lease.ExecContext(context.Background(), `SELECT pg_advisory_lock(hashtext('astro.rebuild.notifications'))`); err != nil {
		t.Fatal(err)
	}
	if _, err := rebuild(t, f, db, projections.RebuildConfig{}); !errors.Is(err, projections.ErrRebuildRunning) {
		t.Fatalf("rebuild while another runs: %v", err)
	}
	lease.Close()

	res, err := rebuild(t, f, db, projections.RebuildConfig{Batch: 10})
	if err != nil || res.ResumedFrom != at || !res.Switched {
		t.Fatalf("resumed rebuild: %+v, %v (interrupted at %d)", res, err, at)
	}
	// The rebuild went only as far as the live model, and the runner goes
	// on from there.
	r, stop := start(t, f, db, notificationsProjector(t, db), 50)
	caughtUp(t, r, last)
	stop()
	if got, want := dump(t, db)+counts(t, db), projectedFresh(t, f, last); got != want {
		t.Fatalf("read model differs from a fresh projection:\n%s\n%s", got, want)
	}
}

// TestResumedRebuildHasTheMigrationsAddedSince: a release that adds a
// migration without a new projector version (an index, a column with a
// default) migrates the live tables. A rebuild an earlier release left must
// not switch in tables made without that migration: it starts over, as it
// does when an earlier release left it without saying by which migrations.
func TestResumedRebuildHasTheMigrationsAddedSince(t *testing.T) {
	for _, tc := range []struct {
		name, migration string // migration: "" for none added
		has             string // counts 1 when the live tables have what the migration made
	}{
		{"index", `CREATE INDEX notifications_by_sender ON notifications (sender_id)`,
			`SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'notifications_by_sender'`},
		{"column", `ALTER TABLE notification_counts ADD COLUMN muted boolean NOT NULL DEFAULT false`,
			`SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'notification_counts' AND column_name = 'muted'`},
		{"unrecorded", "", `SELECT 1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			db := migrated(t)
			live, stop := start(t, f, db, notificationsProjector(t, db), 50)
			defer stop()
			caughtUp(t, live, f.history(t, 60))
			ctx, crash := context.WithCancel(context.Background())
			_, err := projections.Rebuild(ctx, f.log.JetStream(), db, notificationsProjector(t, db), projections.RebuildConfig{
				Stream: f.log.Stream(events.KindInbox), Batch: 10, ProgressEvery: time.Nanosecond,
				Progress: func(p projections.Progress) {
					if p.Applied >= 20 {
						crash()
					}
				}})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("interrupted rebuild: %v", err)
			}

			later := projections.Migrations()
			if tc.migration != "" {
				later = laterMigrations(t, tc.migration)
				if err := projections.MigrateFrom(context.Background(), db, later); err != nil {
					t.Fatal(err)
				}
			} else if _, err := db.Exec(`DROP TABLE IF EXISTS rebuild_notifications.rebuild_migrations`); err != nil {
				t.Fatal(err) // as an earlier release left it
			}
			// Wait: the interrupted run's lease goes with its session, which
			// the server may not have ended yet.
			logs := &records{}
			res, err := rebuild(t, f, db, projections.WithMigrations(projections.RebuildConfig{Batch: 10, Wait: true, Logger: slog.New(logs)}, later))
			if err != nil || !res.Switched {
				t.Fatalf("rebuild after a migration was added: %+v, %v", res, err)
			}
			var has int
			if err := db.Get(&has, tc.has); err != nil || has != 1 {
				t.Fatalf("the switched-in tables lack the added migration (%v); rebuild %+v", err, res)
			}
			if res.ResumedFrom != 0 {
				t.Fatalf("rebuild resumed from %d; want it started over", res.ResumedFrom)
			}
			if !strings.Contains(logs.String(), "WARN discarding") {
				t.Fatalf("no warning logged:\n%s", logs)
			}
		})
	}
}

// laterMigrations are the embedded migrations and one more, as a later
// release has them.
func laterMigrations(t *testing.T, body string) fstest.MapFS {
	t.Helper()
	fsys := fstest.MapFS{}
	files, err := fs.Glob(projections.Migrations(), "migrations/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("embedded migrations: %v, %v", files, err)
	}
	for _, f := range files {
		b, err := fs.ReadFile(projections.Migrations(), f)
		if err != nil {
			t.Fatal(err)
		}
		fsys[f] = &fstest.MapFile{Data: b}
	}
	fsys["migrations/9999_later.sql"] = &fstest.MapFile{Data: []byte(body)}
	return fsys
}

// shouting is a new version of the notifications projector: it stores
// subjects in capitals, so its read model differs from the old one's.
type shouting struct{ *projections.Notifications }

// Version is the one after the projector's own, whatever that is now.
func (shouting) Version() int { return (&projections.Notifications{}).Version() + 1 }

func (s shouting) Apply(ctx context.Context, tx *sqlx.Tx, evs []events.Event) error {
	if err := s.Notifications.Apply(ctx, tx, evs); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `UPDATE notifications SET subject = upper(subject) WHERE subject <> upper(subject)`)
	return err
}

func TestNewProjectorVersionRebuildsAtStart(t *testing.T) {
	f := newFixture(t)
	db := migrated(t)
	old, stop := start(t, f, db, notificationsProjector(t, db), 50)
	caughtUp(t, old, f.history(t, 80))
	stop()

	r, stop := start(t, f, db, shouting{notificationsProjector(t, db)}, 50)
	last := f.history(t, 10) // served and applied by the live model meanwhile
	caughtUp(t, r, last)
	deadline := time.Now().Add(30 * time.Second)
	var version int
	for time.Now().Before(deadline) {
		if err := db.Get(&version, `SELECT version FROM projector_checkpoints WHERE name = 'notifications'`); err != nil {
			t.Fatal(err)
		}
		if version == (shouting{}).Version() && r.State() == projections.StateRunning {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling the checkpoint, bounded by the deadline
	}
	if version != (shouting{}).Version() {
		t.Fatalf("checkpoint version %d after the new version started (state %s)", version, r.State())
	}
	last = max(last, f.history(t, 5))
	caughtUp(t, r, last)
	var lower int
	if err := db.Get(&lower, `SELECT count(*) FROM notifications WHERE subject <> upper(subject)`); err != nil || lower != 0 {
		t.Fatalf("%d rows the new version did not make (%v)", lower, err)
	}
	stop()

	// An instance of the previous release does not rebuild back.
	prev, stopPrev := start(t, f, db, notificationsProjector(t, db), 50)
	defer stopPrev()
	caughtUp(t, prev, f.history(t, 3))
	if err := db.Get(&version, `SELECT version FROM projector_checkpoints WHERE name = 'notifications'`); err != nil || version != (shouting{}).Version() {
		t.Fatalf("checkpoint version %d after the previous version ran (%v)", version, err)
	}
	if left := schemas(t, db); len(left) > 0 || prev.State() != projections.StateRunning {
		t.Fatalf("the previous version rebuilt: schemas %v, state %s", left, prev.State())
	}
}

// records keeps what the projector logs: the test reads what it says at
// error level.
type records struct {
	mu   sync.Mutex
	msgs []string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Level.String()+" "+rec.Message)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }
func (r *records) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.msgs, "\n")
}

// TestRecreatedLogIsNotSkipped: the read model was made from a stream that
// was since deleted and created again, with fewer events: the projector
// notices, rebuilds from the new log, and goes on.
func TestRecreatedLogIsNotSkipped(t *testing.T) {
	f := newFixture(t)
	db := migrated(t)
	r, stop := start(t, f, db, notificationsProjector(t, db), 50)
	caughtUp(t, r, f.history(t, 60))
	stop()

	ctx := context.Background()
	nc := f.log.JetStream().Conn()
	if err := f.log.JetStream().DeleteStream(ctx, f.log.Stream(events.KindInbox)); err != nil {
		t.Fatal(err)
	}
	f2 := newFixtureOn(t, nc, "inbox.test2")
	last := f2.history(t, 10) // far fewer events: their sequences are below the checkpoint

	logs := &records{}
	r2, err := projections.NewRunner(f2.log.JetStream(), db, notificationsProjector(t, db),
		projections.RunnerConfig{Stream: f2.log.Stream(events.KindInbox), Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r2.Run(runCtx) }()
	stop2 := sync.OnceFunc(func() { cancel(); <-done })
	defer stop2()
	caughtUp(t, r2, last)
	more := f2.history(t, 5)
	caughtUp(t, r2, more)
	if !strings.Contains(logs.String(), "ERROR the log does not hold the read model's history") {
		t.Fatalf("no error logged:\n%s", logs)
	}
	stop2()
	if got, want := dump(t, db)+counts(t, db), projectedFresh(t, f2, more); got != want {
		t.Fatalf("read model after the log was recreated differs from a projection of the new log:\n%s\n%s", got, want)
	}
}

// newFixtureOn is a fixture whose log is on nc's server, created if
// missing, with its inbox snapshots under name.
func newFixtureOn(t *testing.T, nc *nats.Conn, name string) fixture {
	t.Helper()
	l, err := natslog.Open(context.Background(), nc, natslog.Config{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := commands.NewStore(l, l.Snapshots(), notifications.NewInbox, commands.StoreConfig{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	h, err := notifications.NewHandlers(store, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	return fixture{log: l, cmd: h}
}
