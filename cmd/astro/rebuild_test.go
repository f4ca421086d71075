package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/nats-io/nats.go"

	"astro/events/natslog"
	"astro/events/natsserver"
	"astro/projections"
	"astro/projections/pgtest"
)

// astroCommand runs `astro args...` as main does, with env as its
// environment, and returns what it printed.
func astroCommand(t *testing.T, env map[string]string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(t.Context(), args, func(k string) string { return env[k] }, &out, &errOut)
	return out.String() + errOut.String(), err
}

func TestProjectionsRebuildCommand(t *testing.T) {
	s := startService(t)
	svc, alice := sender(t, "w1"), token(t, "alice", "w1")
	for range 4 {
		s.send(svc, "alice", "bob", "task")
	}
	out, err := astroCommand(t, s.env, "projections", "rebuild", "notifications")
	if want := fmt.Sprintf("switched notifications to the rebuilt read model (version %d)", (&projections.Notifications{}).Version()); err != nil || !strings.Contains(out, want) {
		t.Fatalf("rebuild: %v\n%s", err, out)
	}
	if p := s.page(alice, ""); p.TotalCount != 4 || len(p.Items) == 0 {
		t.Fatalf("after the switch: %+v", p)
	}

	// A live read model gone wrong: the rebuild finds it out and does not
	// switch unless told to.
	db, err := sqlx.Open("postgres", s.env["ASTRO_DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE notifications SET subject = 'tampered'`); err != nil {
		t.Fatal(err)
	}
	out, err = astroCommand(t, s.env, "projections", "rebuild", "notifications")
	if !errors.Is(err, projections.ErrDisagree) || !strings.Contains(out, "notifications: 4 rows only in the live read model") ||
		!strings.Contains(out, "tampered") || !strings.Contains(out, "rows only in the rebuilt read model") {
		t.Fatalf("rebuild of a read model that differs: %v\n%s", err, out)
	}
	if p := s.page(alice, ""); p.Items[0].Subject != "tampered" {
		t.Fatalf("a rebuild that disagrees switched: %+v", p.Items[0])
	}
	// Counts gone wrong too, and remembered so by this instance: it reads
	// them again on a redrive's word.
	if _, err := db.Exec(`UPDATE notification_counts SET unread = 0`); err != nil {
		t.Fatal(err)
	}
	if err := s.connectNATS().Publish(projections.RedrivenSubject("notifications"), nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() error {
		if n := s.unread(alice); n != 0 {
			return fmt.Errorf("the tampered count reads %d", n)
		}
		return nil
	})
	out, err = astroCommand(t, s.env, "projections", "rebuild", "--force", "notifications")
	if err != nil || !strings.Contains(out, "switched notifications") || !strings.Contains(out, "tampered") {
		t.Fatalf("forced rebuild: %v\n%s", err, out)
	}
	// The switch tells every instance to forget what it remembered of the
	// replaced read model: before, the tampered count stayed in memory
	// until the inbox next changed.
	waitFor(t, 10*time.Second, func() error {
		if n := s.unread(alice); n != 4 {
			return fmt.Errorf("after the forced switch unreadcount reads %d, want 4", n)
		}
		return nil
	})
	if p := s.page(alice, ""); p.Items[0].Subject != "Task assigned" || p.TotalCount != 4 {
		t.Fatalf("after the forced switch: %+v", p)
	}
	// The live projector goes on applying, into the new tables.
	s.send(svc, "alice", "bob", "task")
	if p := s.page(alice, ""); p.TotalCount != 5 {
		t.Fatalf("a send after the switch: %+v", p)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"projections", "rebuild"}, "want one read model's name"},
		{[]string{"projections", "rebuild", "parrots"}, `no read model "parrots"`},
		{[]string{"projections", "rebuild", "notifications", "holidays"}, "want one read model's name"},
		{[]string{"projections", "shuffle"}, "unknown command"},
	} {
		if _, err := astroCommand(t, s.env, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("astro %s: %v, want %q", strings.Join(c.args, " "), err, c.want)
		}
	}
}

// TestLogRestoredFromAnOlderBackup: the log's store is put back from a copy
// older than the read models. The projectors must not skip the new events
// that reuse the sequence numbers the read models already passed: they
// rebuild from the log, and the read models end up as a projection of the
// log from scratch makes them.
func TestLogRestoredFromAnOlderBackup(t *testing.T) {
	store := t.TempDir()
	var ns *natsserver.Server
	t.Cleanup(func() { ns.Shutdown() }) // first registered: runs after every service's cleanups
	startNATS := func(listen string) {
		t.Helper()
		var err error
		if ns, err = natsserver.Start(context.Background(), natsserver.Config{StoreDir: store, Listen: listen}); err != nil {
			t.Fatal(err)
		}
	}
	startNATS("127.0.0.1:0")
	addr := strings.TrimPrefix(ns.ClientURL(), "nats://") // the same address across restarts
	env := map[string]string{
		"ASTRO_HTTP_ADDR": "127.0.0.1:0", "ASTRO_DATA_DIR": t.TempDir(), "ASTRO_NATS_URL": ns.ClientURL(),
		"ASTRO_DATABASE_URL": pgtest.URL(t), "ASTRO_JWT_SECRET": testSecret, "ASTRO_RATE_LIMIT": "off", "ASTRO_LOG_LEVEL": "warn",
	}
	svc, alice := sender(t, "w1"), token(t, "alice", "w1")
	restart := func(restore func()) *service {
		t.Helper()
		ns.Shutdown()
		if restore != nil {
			restore()
		}
		startNATS(addr)
		return startWithEnv(t, env)
	}

	s := startWithEnv(t, env)
	for range 5 {
		s.send(svc, "alice", "bob", "task")
	}
	s.stop()
	backup := filepath.Join(t.TempDir(), "backup")
	s = restart(func() {
		if err := os.CopyFS(backup, os.DirFS(store)); err != nil {
			t.Fatal(err)
		}
	})
	for range 10 {
		s.send(svc, "alice", "bob", "task")
	}
	if p := s.page(alice, ""); p.TotalCount != 15 {
		t.Fatalf("before the restore: %d notifications", p.TotalCount)
	}
	s.stop()

	// The log goes back to 5 events; the read models are at 15.
	s = restart(func() {
		if err := os.RemoveAll(store); err != nil {
			t.Fatal(err)
		}
		if err := os.CopyFS(store, os.DirFS(backup)); err != nil {
			t.Fatal(err)
		}
	})
	for range 3 {
		s.send(svc, "alice", "bob", "task")
	}
	if p := s.page(alice, ""); p.TotalCount != 8 {
		t.Fatalf("after the restore and 3 sends: %d notifications, want 8", p.TotalCount)
	}
	s.stop()

	live, err := sqlx.Open("postgres", env["ASTRO_DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	fresh := projectAll(t, ns.ClientURL())
	for _, table := range []string{"notifications", "notification_counts", "holidays", "resources"} {
		if got, want := tableRows(t, live, table), tableRows(t, fresh, table); got != want {
			t.Errorf("%s after the restore differs from a projection of the log:\n%s\n%s", table, got, want)
		}
	}
}

// projectAll projects the whole log into a fresh database.
func projectAll(t *testing.T, natsURL string) *sqlx.DB {
	t.Helper()
	ctx := t.Context()
	db := pgtest.Open(t)
	if err := projections.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	l, err := natslog.Open(ctx, nc, natslog.Config{Bind: true})
	if err != nil {
		t.Fatal(err)
	}
	n, err := projections.NewNotifications(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	h, err := projections.NewHolidays(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []projections.Projector{n, h} {
		r, err := projections.NewRunner(l.JetStream(), db, p, projections.RunnerConfig{Stream: l.StreamFor(p.Subjects()[0])})
		if err != nil {
			t.Fatal(err)
		}
		var last uint64
		for _, subject := range p.Subjects() {
			seq, err := l.LastSeq(ctx, subject)
			if err != nil {
				t.Fatal(err)
			}
			last = max(last, seq)
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(runCtx) }()
		waitCtx, cancelWait := context.WithTimeout(ctx, 30*time.Second)
		err = r.WaitFor(waitCtx, last)
		cancelWait()
		cancel()
		if rerr := <-done; err != nil || rerr != nil {
			t.Fatalf("project %s to %d: %v, %v", p.Name(), last, err, rerr)
		}
	}
	return db
}

// tableRows is a table's rows, in a canonical order.
func tableRows(t *testing.T, db *sqlx.DB, table string) string {
	t.Helper()
	var rows []string
	if err := db.Select(&rows, `SELECT t::text FROM `+table+` t ORDER BY 1`); err != nil {
		t.Fatal(err)
	}
	return strings.Join(rows, "\n")
}
