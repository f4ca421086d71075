package natsserver

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
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
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	publishOnce(t, js, "after")
	if n := messages(t, nc, false); n != 2 {
		t.Errorf("%d messages after the restart, want 2: the one before, the one after, once", n)
	}
}
