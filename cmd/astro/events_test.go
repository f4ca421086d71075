package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/nats-io/nats.go/jetstream"

	"astro/events/natslog"
	"astro/events/natsserver"
	"astro/projections"
)

func TestEventsCommands(t *testing.T) {
	s := startService(t)
	svc := sender(t, "w1")
	s.send(svc, "alice", "bob", "task")
	s.send(svc, "carol", "bob", "task")
	alice := token(t, "alice", "w1")
	s.call("POST", "/api/data/notifications/markallread", alice, nil).want(t, 200)

	runCLI := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		env := map[string]string{"ASTRO_NATS_URL": s.env["ASTRO_NATS_URL"]}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := run(ctx, args, func(k string) string { return env[k] }, &out, &errOut)
		return out.String(), err
	}
	out, err := runCLI("events", "tail")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("tail printed %d lines, want 3:\n%s", len(lines), out)
	}
	var first struct {
		Stream string
		Seq    uint64
		Type   string
		Data   map[string]any
	}
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil || first.Stream != "ASTRO_INBOXES" || first.Seq != 1 || first.Type != "NotificationSent" || first.Data["recipientId"] != "alice" {
		t.Fatalf("first line %s (%v)", lines[0], err)
	}
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"events", "tail", "--type", "AllNotificationsRead"}, 1},
		{[]string{"events", "tail", "--subject", "astro.events.*.inbox.*", "--from-seq", "2"}, 2},
		{[]string{"events", "tail", "--since", time.Now().Add(time.Hour).Format(time.RFC3339)}, 0},
		{[]string{"events", "tail", "--subject", "astro.events.w1.inbox.carol"}, 1},
	} {
		out, err := runCLI(c.args...)
		if got := len(strings.FieldsFunc(out, func(r rune) bool { return r == '\n' })); err != nil || got != c.want {
			t.Errorf("%v: %d lines, %v\n%s", c.args, got, err, out)
		}
	}
	// Both place the start, and --from-seq used to win in silence.
	if _, err := runCLI("events", "tail", "--subject", "astro.events.*.inbox.*", "--from-seq", "2", "--since", time.Now().Format(time.RFC3339)); err == nil || !strings.Contains(err.Error(), "--since and --from-seq") {
		t.Errorf("--since with --from-seq: %v, want a usage error naming both", err)
	}
	if out, err := runCLI("events", "parked"); err != nil || out != "" {
		t.Fatalf("parked: %q %v", out, err)
	}
	out, err = runCLI("events", "redrive")
	if err != nil || !strings.Contains(out, `"projector":"notifications","applied":0,"parked":0`) {
		t.Fatalf("redrive: %q %v", out, err)
	}
	// A projector that does not exist is named as such, not as one no
	// service runs.
	for _, sub := range []string{"redrive", "parked"} {
		if _, err := runCLI("events", sub, "--projector", "nosuch"); err == nil || !strings.Contains(err.Error(), `no projector "nosuch"`) {
			t.Errorf("%s --projector nosuch: %v", sub, err)
		}
	}
	// Each subcommand takes its own flags only.
	for _, args := range [][]string{{"events", "parked", "--type", "X"}, {"events", "redrive", "--follow"}, {"events", "tail", "--projector", "notifications"}} {
		if _, err := runCLI(args...); err == nil {
			t.Errorf("%v: accepted another subcommand's flag", args)
		}
	}
}

// TestFollowNeedsTheService: with no service running, a tool opens the
// store itself and holds the data directory while it runs. A one-off read
// may; `events tail --follow`, which runs until interrupted, kept the
// service from starting on the directory, following a log nothing wrote.
func TestFollowNeedsTheService(t *testing.T) {
	dir := t.TempDir()
	// A log the service made and left, stopped.
	passwords, err := natsPasswords(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := natsserver.Start(t.Context(), natsserver.Config{StoreDir: filepath.Join(dir, "nats"), Listen: "off", Passwords: passwords})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := natslog.Open(t.Context(), nc, natslog.Config{}); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	srv.Shutdown()

	env := map[string]string{"ASTRO_DATA_DIR": dir}
	tail := func(args ...string) error {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		return run(ctx, append([]string{"events", "tail"}, args...), func(k string) string { return env[k] }, io.Discard, io.Discard)
	}
	if err := tail(); err != nil {
		t.Fatalf("a one-off tail of a stopped service's log: %v", err)
	}
	if err := tail("--follow"); err == nil || !strings.Contains(err.Error(), "no service runs") {
		t.Fatalf("--follow with no service running: %v, want a refusal saying so", err)
	}
}

// A message on an event subject that is not an event (no ce-* headers)
// stopped a tail at it, and hid every event after it: the one place an
// operator would look for it. The tail shows it as recorded and goes on.
func TestEventsTailShowsAMalformedMessage(t *testing.T) {
	s := startService(t)
	svc := sender(t, "w1")
	s.send(svc, "alice", "bob", "task")
	nc := s.connectNATS()
	ack, err := nc.Request("astro.events.w1.inbox.u9", []byte("garbage"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Gone before the harness checks every event of the log against the
	// contract, which this message is not meant to meet.
	t.Cleanup(func() {
		var pub jetstream.PubAck
		if err := json.Unmarshal(ack.Data, &pub); err != nil {
			t.Fatal(err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		st, err := js.Stream(context.Background(), pub.Stream)
		if err == nil {
			err = st.DeleteMsg(context.Background(), pub.Sequence)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	s.send(svc, "carol", "bob", "task")
	for _, follow := range []bool{false, true} {
		args := []string{"events", "tail", "--subject", "astro.events.*.inbox.*"}
		if follow {
			args = append(args, "--follow")
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		var out syncBuffer
		done := make(chan error, 1)
		go func() { done <- run(ctx, args, func(k string) string { return s.env[k] }, &out, io.Discard) }()
		if follow {
			// It runs until interrupted: interrupt it once it has printed
			// the event after the bad message, or has had the time to.
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && strings.Count(out.String(), "\n") < 3; {
				time.Sleep(20 * time.Millisecond)
			}
			cancel()
		}
		err := <-done
		cancel()
		if err != nil {
			t.Fatalf("tail (follow %v): %v", follow, err)
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(lines) != 3 {
			t.Fatalf("tail (follow %v): %d lines, want 3:\n%s", follow, len(lines), out.String())
		}
		var bad struct {
			Stream, Subject, Data, Error string
			Seq                          uint64
		}
		if err := json.Unmarshal([]byte(lines[1]), &bad); err != nil || bad.Stream != "ASTRO_INBOXES" || bad.Seq != 2 ||
			bad.Subject != "astro.events.w1.inbox.u9" || bad.Data != "garbage" || !strings.Contains(bad.Error, "malformed") {
			t.Errorf("tail (follow %v): the malformed message as %s (%v)", follow, lines[1], err)
		}
		if !strings.Contains(lines[2], `"recipientId":"carol"`) {
			t.Errorf("tail (follow %v): after it %s, want carol's notification", follow, lines[2])
		}
	}
}

// TestARedriveIsForgotten: a redrive changes a read model where the log
// does not move, so no position tells an instance that the counts it
// remembers are stale; its word makes the instance read them again.
func TestARedriveIsForgotten(t *testing.T) {
	s := startService(t)
	s.send(sender(t, "w1"), "alice", "bob", "task")
	alice := token(t, "alice", "w1")
	if got := s.unread(alice); got != 1 {
		t.Fatalf("unread %d, want 1", got)
	}
	// What a redrive's transaction does, by hand: the read model changes
	// and the log stays where it is.
	db, err := sqlx.Open("postgres", s.env["ASTRO_DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE notification_counts SET unread = 7 WHERE workspace_id = 'w1' AND recipient_id = 'alice'`); err != nil {
		t.Fatal(err)
	}
	if got := s.unread(alice); got != 1 {
		t.Fatalf("unread %d before the word of a redrive, want the 1 remembered", got)
	}
	nc := s.connectNATS()
	if err := nc.Publish(projections.RedrivenSubject("notifications"), nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() error {
		if got := s.unread(alice); got != 7 {
			return fmt.Errorf("unread %d after the word of a redrive, want the read model's 7", got)
		}
		return nil
	})
}
