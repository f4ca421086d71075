package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"astro/events/natslog"
	"astro/events/natsserver"
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
		Seq  uint64
		Type string
		Data map[string]any
	}
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil || first.Seq != 1 || first.Type != "NotificationSent" || first.Data["recipientId"] != "alice" {
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
