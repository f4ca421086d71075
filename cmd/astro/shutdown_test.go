package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
)

// A read under way when a shutdown begins is answered within the grace,
// even when it waits for its read model: the projectors run until the
// HTTP server has finished its requests.
func TestReadUnderWayAtShutdownIsAnswered(t *testing.T) {
	s := startService(t)
	svc, bob := sender(t, "w1"), token(t, "bob", "w1")
	s.send(svc, "bob", "alice", "TaskAssigned")
	if got := s.unread(bob); got != 1 {
		t.Fatalf("unread %d, want 1", got)
	}
	release := holdTable(t, s.env["ASTRO_DATABASE_URL"], "notifications")
	s.send(svc, "bob", "alice", "TaskAssigned") // in the log, not in the read model

	type answer struct {
		status int
		body   []byte
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		req, err := http.NewRequest("GET", s.base+"/api/data/notifications/unreadcount", nil)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		req.Header.Set("Authorization", "Bearer "+bob)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		answered <- answer{resp.StatusCode, body, err}
	}()
	waitFor(t, 10*time.Second, func() error { // the read waits for its read model
		if n := s.scrape(s.base+"/metrics").value("astro_projector_reads_waiting", "projector", "notifications"); n != 1 {
			return fmt.Errorf("%v reads waiting for the notifications projector, want 1", n)
		}
		return nil
	})

	stopped := s.beginStop()
	release()

	a := <-answered
	if a.err != nil {
		t.Fatalf("the read under way at shutdown: %v", a.err)
	}
	var env struct{ Data struct{ UnreadCount int } }
	if err := json.Unmarshal(a.body, &env); a.status != http.StatusOK || err != nil || env.Data.UnreadCount != 2 {
		t.Fatalf("the read under way at shutdown: %d %s, want 200 with an unread count of 2", a.status, a.body)
	}
	<-stopped
}

// holdTable locks table in the database at url until release (or the
// test's end): its projector stays behind, and reads of it go on.
func holdTable(t *testing.T, url, table string) (release func()) {
	t.Helper()
	db, err := sqlx.Open("postgres", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	tx, err := db.Beginx()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback() })
	if _, err := tx.Exec(`LOCK TABLE ` + table + ` IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
	}
}

// A request still running when the shutdown's grace runs out (a read
// waiting for its read model, held behind a lock) is cut off, before the
// parts it uses stop under it, and run says so: it returned nil, with
// nothing in the log, and the connection stayed open.
func TestShutdownGraceRunningOutIsReported(t *testing.T) {
	env, _ := serviceEnv(t, func(env map[string]string) { env["ASTRO_SHUTDOWN_GRACE"] = "1s" })
	m := runAsMain(t, env)
	m.waitListening()
	s := &service{t: t, base: m.announced("astro: listening on "), env: env, client: http.DefaultClient}
	svc, bob := sender(t, "w1"), token(t, "bob", "w1")
	s.send(svc, "bob", "alice", "TaskAssigned")
	if got := s.unread(bob); got != 1 {
		t.Fatalf("unread %d, want 1", got)
	}
	holdTable(t, env["ASTRO_DATABASE_URL"], "notifications") // held past the grace
	s.send(svc, "bob", "alice", "TaskAssigned")

	read := make(chan error, 1)
	go func() {
		req, err := http.NewRequest("GET", s.base+"/api/data/notifications/unreadcount", nil)
		if err != nil {
			read <- err
			return
		}
		req.Header.Set("Authorization", "Bearer "+bob)
		// A connection of its own: on one reused from the pool, Go's
		// client sends a GET cut off before its answer again, on a new
		// connection the stopped service refuses.
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("answered %d", resp.StatusCode)
		}
		read <- err
	}()
	waitFor(t, 10*time.Second, func() error {
		if n := s.scrape(s.base+"/metrics").value("astro_projector_reads_waiting", "projector", "notifications"); n != 1 {
			return fmt.Errorf("%v reads waiting for the notifications projector, want 1", n)
		}
		return nil
	})

	m.cancel()
	select {
	case err := <-m.done:
		if err == nil || !strings.Contains(err.Error(), "grace") {
			t.Errorf("run returned %v, want the grace that ran out", err)
		}
		// The stop ended the read, not its client.
		if log := m.stderr.String(); !strings.Contains(log, `msg="request cut off"`) || strings.Contains(log, "client disconnected") {
			t.Errorf("the log does not say the read was cut off:\n%s", log)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the service did not stop")
	}
	select {
	case err := <-read:
		if !strings.Contains(fmt.Sprint(err), "EOF") {
			t.Errorf("the read cut off: %v, want its connection closed", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the read's connection stayed open after the stop")
	}
}
