package natsserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ErrUnwritable says that the store cannot take writes: the server or its
// JetStream is down, or a stream's store failed a write.
var ErrUnwritable = errors.New("the event log's store cannot take writes")

// Healthy returns an error wrapping ErrUnwritable when the server cannot
// take writes. A store that failed a write once (a full disk, an I/O error)
// refuses every write of its stream from then on, whatever the disk does,
// until the server restarts (Watch): nats-server does not retry one on its
// own. Other findings of the server's health check (a stream not
// recovered) are not this: Astro's own checks see a stream missing.
func (s *Server) Healthy() error {
	if !s.mu.TryRLock() {
		return fmt.Errorf("%w: the server is restarting", ErrUnwritable)
	}
	defer s.mu.RUnlock()
	if !s.ns.Running() {
		return fmt.Errorf("%w: the server is down", ErrUnwritable)
	}
	h := s.ns.Healthz(&server.HealthzOptions{Details: true})
	for _, e := range h.Errors {
		// The server words a failed store so; its errors have no code.
		if e.Type == server.HealthzErrorJetStream || e.Type == server.HealthzErrorStream && strings.Contains(e.Error, "write error") {
			return fmt.Errorf("%w: %s", ErrUnwritable, e.Error)
		}
	}
	return nil
}

// restart shuts the server down and starts it again on the same store and
// options: it reloads every stream and consumer from the store, as at the
// program's start, so what it acknowledged is there. Connections close;
// in-process ones reconnect to the new server (InProcessConn), TCP ones to
// the same port, and nats.go then sends what it buffered while it
// reconnected: a publish that timed out meanwhile may still be stored, as
// after any reconnect. The whole server, not just JetStream: re-enabling
// JetStream in a running server races with the API requests it serves.
func (s *Server) restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
	ns, err := run(context.Background(), s.opts.Clone(), s.log)
	if err != nil {
		return fmt.Errorf("natsserver: restart: %w", err) // the next check tries again
	}
	s.ns = ns
	return nil
}

// Watch checks the store every interval until ctx ends, and heals it when
// two checks in a row found it unwritable. A store that fails
// again soon after a heal (the disk is still full) is healed less often,
// up to once a minute, so that a full disk does not have JetStream reload
// its streams over and over.
func (s *Server) Watch(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		return errors.New("natsserver: Watch needs an interval")
	}
	backoff := interval // after a restart, until the next check
	failed := false     // the last check failed
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		reason := s.Healthy()
		if reason == nil || !failed {
			// Twice in a row: a failed store stays failed, and a
			// restart is no answer to anything passing.
			if reason == nil {
				backoff = interval
			}
			failed = reason != nil
			t.Reset(interval)
			continue
		}
		failed = false
		if err := s.restart(); err != nil {
			s.log.Error("the event log's store cannot take writes, and the NATS server did not restart; trying again later", "reason", reason, "err", err)
		} else {
			s.log.Warn("restarted the NATS server: the event log's store could not take writes, and writes failed until now", "reason", reason)
		}
		t.Reset(backoff)
		backoff = min(2*backoff, time.Minute)
	}
}
