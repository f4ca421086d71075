package natsserver

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"os"
	"path/filepath"
	"testing"
)

// A restart runs JetStream on the configuration it started with. The
// store's limit, recomputed from the disk's free space as at a first
// start, would be a full disk's: every write refused for good, with the
// server's health check all clear. The connection in process outlives the
// restart.
func TestRestartKeepsTheConfiguration(t *testing.T) {
	dir := t.TempDir()
	s := start(t, Config{StoreDir: dir})
	nc, err := s.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	messages(t, nc, true)
	publish(t, nc)
	before := *s.ns.JetStreamConfig()

	// The disk has less room than at start.
	ballast, err := os.Create(filepath.Join(dir, "ballast"))
	if err != nil {
		t.Fatal(err)
	}
	defer ballast.Close()
	if _, err := ballast.Write(make([]byte, 16<<20)); err != nil {
		t.Fatal(err)
	}
	if err := ballast.Sync(); err != nil {
		t.Fatal(err)
	}

	if err := s.restart(); err != nil {
		t.Fatal(err)
	}
	after := *s.ns.JetStreamConfig()
	if after.StoreDir != before.StoreDir || after.MaxStore != before.MaxStore || after.MaxMemory != before.MaxMemory ||
		after.SyncAlways != before.SyncAlways || after.SyncInterval != before.SyncInterval || after.Strict != before.Strict {
		t.Errorf("JetStream restarted on\n%+v\nwant the configuration it started on\n%+v", after, before)
	}
	if url := s.ClientURL(); url != "" {
		t.Errorf("ClientURL %q after a restart without TCP", url)
	}
	// A publish that meets the connection's close is lost or sent again
	// after the reconnect: tried again, as Astro's appends are.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	attempts := 0
	deadline := time.Now().Add(15 * time.Second)
	for {
		attempts++
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, err := js.Publish(ctx, "events.x", []byte("hello"), jetstream.WithMsgID("after"))
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no publish taken 15 s after the restart: %v", err)
		}
	}
	if n := messages(t, nc, false); n != 2 {
		t.Errorf("%d messages after the restart, want 2 (the one before, the one after, once: %d attempts)", n, attempts)
	}
}
