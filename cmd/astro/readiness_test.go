package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"astro/projections"
)

// TestReadinessFollowsLag holds the notifications projector's lock, as a
// stuck instance elsewhere would, so that nothing applies the log: the lag
// grows past the bound, /readyz turns 503 and says which projector lags by
// how much, and `astro projections status` shows it. Once the lock comes
// free, this instance takes over, catches up, and is ready again.
func TestReadinessFollowsLag(t *testing.T) {
	var lock *sqlx.Conn
	s := startService(t, func(env map[string]string) {
		env["ASTRO_READY_MAX_LAG_EVENTS"] = "2"
		env["ASTRO_READY_MAX_LAG"] = "0"
		db, err := sqlx.Open("postgres", env["ASTRO_DATABASE_URL"])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		if lock, err = db.Connx(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := lock.ExecContext(context.Background(), `SELECT pg_advisory_lock(hashtext('astro.projector.notifications'))`); err != nil {
			t.Fatal(err)
		}
	})
	status := func() map[string]projections.Status {
		t.Helper()
		var out, errOut bytes.Buffer
		err := run(context.Background(), []string{"projections", "status", "--json",
			"--database-url", s.env["ASTRO_DATABASE_URL"], "--nats-url", s.env["ASTRO_NATS_URL"]},
			func(string) string { return "" }, &out, &errOut)
		if err != nil {
			t.Fatalf("astro projections status: %v\n%s", err, errOut.String())
		}
		got := map[string]projections.Status{}
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			var st projections.Status
			if err := json.Unmarshal([]byte(line), &st); err != nil {
				t.Fatalf("status line %q: %v", line, err)
			}
			got[st.Projector] = st
		}
		return got
	}

	tok := sender(t, "w-lag")
	const sends = 3
	for range sends {
		s.send(tok, "bob", "alice", "lag")
	}
	// Not s.call: a 503 is this probe's expected answer, not a server error.
	resp, err := s.client.Get(s.base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var ready struct{ Error struct{ Message string } }
	err = json.NewDecoder(resp.Body).Decode(&ready)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 503 {
		t.Fatalf("/readyz answered %d (%v) while a projector lags past the bound, want 503", resp.StatusCode, err)
	}
	if msg := ready.Error.Message; !strings.Contains(msg, "projector notifications lags 3 events") {
		t.Errorf("/readyz says %q, want the projector and its lag", msg)
	}
	st := status()
	if n := st["notifications"]; n.LagEvents != sends || n.Position != 0 || n.LogLast < sends || n.LagSeconds <= 0 {
		t.Errorf("notifications status %+v, want %d events behind from position 0", n, sends)
	}
	if h := st["holidays"]; h.LagEvents != 0 || h.State != projections.StateRunning {
		t.Errorf("holidays status %+v, want running and caught up", h)
	}

	// The stuck instance goes away.
	if _, err := lock.ExecContext(context.Background(), `SELECT pg_advisory_unlock(hashtext('astro.projector.notifications'))`); err != nil {
		t.Fatal(err)
	}
	lock.Close()
	s.waitReady()
	waitFor(t, 30*time.Second, func() error {
		n := status()["notifications"]
		if n.State == projections.StateRunning && n.LagEvents == 0 && n.LagSeconds == 0 && n.Position >= sends {
			return nil
		}
		return fmt.Errorf("notifications did not catch up: %+v", n)
	})
}
