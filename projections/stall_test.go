package projections

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestSecondStallDoesNotBlockTheClient: the runner reads a stall between
// batches. While a batch retries through a database outage, the consumer
// can go silent, deliver an event, and go silent again; signalling that
// second stall must not hold the client's goroutine that reports errors.
func TestSecondStallDoesNotBlockTheClient(t *testing.T) {
	r := &Runner{p: &Notifications{}, cfg: RunnerConfig{Logger: slog.New(slog.DiscardHandler)}}
	var silent atomic.Int32
	stalled := make(chan error, 1)
	onErr := r.watchStall(&silent, stalled)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 2 {
			for range maxSilentPulls {
				onErr(nil, jetstream.ErrNoHeartbeat)
			}
			silent.Store(0) // a delivery, as the runner's handler of messages does
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the second stall blocked the client's error handler")
	}
	if err := <-stalled; !errors.Is(err, jetstream.ErrNoHeartbeat) {
		t.Fatalf("stall signalled: %v", err)
	}
}
