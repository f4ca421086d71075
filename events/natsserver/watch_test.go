package natsserver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A server that cannot take writes is restarted by Watch, and the stream
// has what it acknowledged before and takes new writes on the same
// connection. A store that failed a write (a full disk: the fault suite's
// TestFaultsDiskFull) and JetStream turned off, the fault a test in process
// can cause, are the same to Healthy.
func TestWatchRestartsAServerThatCannotWrite(t *testing.T) {
	s := start(t, Config{StoreDir: t.TempDir()})
	nc, err := s.Connect(nats.ReconnectWait(50 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	messages(t, nc, true)
	for range 3 {
		publish(t, nc)
	}
	if err := s.Healthy(); err != nil {
		t.Fatalf("Healthy at start: %v", err)
	}
	if err := s.ns.ShutdownJetStream(); err != nil {
		t.Fatal(err)
	}
	if err := s.Healthy(); !errors.Is(err, ErrUnwritable) {
		t.Fatalf("Healthy with JetStream off: %v, want ErrUnwritable", err)
	}

	watching, stop := context.WithCancel(t.Context())
	watched := make(chan error, 1)
	go func() { watched <- s.Watch(watching, 20*time.Millisecond) }()
	defer func() {
		stop()
		if err := <-watched; err != nil {
			t.Error(err)
		}
	}()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	publishOnce(t, js, "after")
	if err := s.Healthy(); err != nil {
		t.Fatalf("Healthy after the restart: %v", err)
	}
	if n := messages(t, nc, false); n != 4 {
		t.Fatalf("the stream holds %d messages, want the 3 acknowledged before and the 1 after", n)
	}
}

func TestWatchNeedsAnInterval(t *testing.T) {
	s := start(t, Config{StoreDir: t.TempDir()})
	if err := s.Watch(t.Context(), 0); err == nil {
		t.Fatal("Watch with no interval returned nil")
	}
}
