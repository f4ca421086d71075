// Package natstest owns the NATS servers that tests use: a fresh in-process
// JetStream server per call, stored in the test's temp dir and shut down with
// the test; and the one reader of a whole event log that tests check
// against.
package natstest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"astro/events"
	"astro/events/natslog"
	"astro/events/natsserver"

	"github.com/nats-io/nats.go"
)

// Server starts an in-process JetStream server (no TCP) with its store in
// t.TempDir, shut down when the test ends.
func Server(t testing.TB) *natsserver.Server {
	t.Helper()
	s, err := natsserver.Start(t.Context(), natsserver.Config{StoreDir: t.TempDir(), Listen: "off"})
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// Conn connects to a fresh Server; the connection is closed when the test
// ends, before the server shuts down.
func Conn(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := Server(t).Connect()
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// ReadLog returns every event of the log on nc, in order, as far as it went
// when the read began. It binds the event stream as it is (changing
// nothing) and scans it. A scan that fails, as an ordered consumer placed
// on a dead node of a degraded cluster does, is started again after the
// last event read, a bounded number of times; then the rest is read one
// message at a time from the stream leader.
func ReadLog(ctx context.Context, nc *nats.Conn) ([]events.Event, error) {
	l, err := natslog.Open(ctx, nc, natslog.Config{Bind: true, EventsOnly: true})
	if err != nil {
		return nil, fmt.Errorf("natstest: bind the log: %w", err)
	}
	end, err := l.Position(ctx)
	if err != nil {
		return nil, fmt.Errorf("natstest: %w", err)
	}
	var out []events.Event
	last := uint64(0)
	keep := func(e events.Event) error {
		out, last = append(out, e), e.Seq
		return nil
	}
	const all = events.SubjectPrefix + ".>"
	for resets := 0; last < end; resets++ {
		if resets > 5 {
			if _, err := l.Read(ctx, all, last, keep); err != nil {
				return nil, fmt.Errorf("natstest: read the log after %d: %w", last, err)
			}
			break
		}
		if resets > 0 {
			time.Sleep(250 * time.Millisecond) // let a cluster settle; bounded by the resets
		}
		scanCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = l.Scan(scanCtx, all, natslog.ScanFrom{Seq: last + 1}, keep)
		cancel()
		if err != nil && ctx.Err() != nil {
			return nil, fmt.Errorf("natstest: read the log at %d of %d: %w", last, end, err)
		}
	}
	if last < end {
		return nil, fmt.Errorf("natstest: read the log up to %d of %d", last, end)
	}
	return out, nil
}
