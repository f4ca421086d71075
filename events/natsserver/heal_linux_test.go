package natsserver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"astro/events/natsserver"
	"astro/events/natstest"
)

// A full disk fails a stream's store for good, as nats-server goes; Watch
// restarts the server, again once the disk takes writes, and the stream has
// what it acknowledged before and takes new writes, on the same
// connection, without a restart of the program.
func TestWatchHealsAStoreThatFailedAWrite(t *testing.T) {
	srv := natstest.Server(t)
	js, err := jetstream.New(natstest.ConnTo(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events.>"}})
	if err != nil {
		t.Fatal(err)
	}
	attempts := 0
	publish := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		attempts++
		_, err := js.Publish(ctx, "events.x", []byte("an event"))
		return err
	}
	for range 3 {
		if err := publish(5 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	free := natstest.DiskFull(t)
	if err := publish(time.Second); err == nil {
		t.Fatal("an append on a full disk was acknowledged")
	}
	if err := srv.Healthy(); !errors.Is(err, natsserver.ErrUnwritable) {
		t.Fatalf("Healthy with a failed store: %v, want ErrUnwritable", err)
	}
	watching, stop := context.WithCancel(t.Context())
	watched := make(chan error, 1)
	go func() { watched <- srv.Watch(watching, 20*time.Millisecond) }()
	t.Cleanup(func() {
		stop()
		if err := <-watched; err != nil {
			t.Error(err)
		}
	})
	// A restart while the disk is full changes nothing.
	deadline := time.Now().Add(10 * time.Second)
	for srv.Healthy() != nil { // restarted, and not written to since
		if time.Now().After(deadline) {
			t.Fatal("no restart of JetStream 10 s after a store failed a write")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := publish(time.Second); err == nil {
		t.Fatal("an append on a full disk was acknowledged")
	}
	free()

	deadline = time.Now().Add(10 * time.Second)
	for publish(time.Second) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the stream still refuses writes 10 s after the disk was freed (Healthy: %v)", srv.Healthy())
		}
	}
	if err := srv.Healthy(); err != nil {
		t.Fatalf("Healthy after the heal: %v", err)
	}
	info, err := stream.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// A publish that timed out may be stored still: the connection sends
	// what it buffered while it reconnected, as after any reconnect.
	if n := info.State.Msgs; n < 4 || n > uint64(attempts) {
		t.Fatalf("the stream holds %d messages, want the 3 acknowledged before, the 1 after, and at most the %d that timed out", n, attempts-4)
	}
}

func TestWatchNeedsAnInterval(t *testing.T) {
	if err := natstest.Server(t).Watch(t.Context(), 0); err == nil {
		t.Fatal("Watch with no interval returned nil")
	}
}
