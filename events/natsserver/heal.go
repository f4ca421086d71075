package natsserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ErrUnwritable says that the store cannot take writes: JetStream is off,
// or a stream's store failed a write.
var ErrUnwritable = errors.New("the event log's store cannot take writes")

// Healthy returns an error wrapping ErrUnwritable when JetStream cannot
// take writes. A store that failed a write once (a full disk, an I/O error)
// refuses every write of its stream from then on, whatever the disk does,
// until JetStream restarts (Watch): nats-server does not retry one on its
// own. Other findings of the server's health check (a stream not
// recovered) are not this: Astro's own checks see a stream missing.
func (s *Server) Healthy() error {
	h := s.ns.Healthz(&server.HealthzOptions{Details: true})
	for _, e := range h.Errors {
		// The server words a failed store so; its errors have no code.
		if e.Type == server.HealthzErrorJetStream || e.Type == server.HealthzErrorStream && strings.Contains(e.Error, "write error") {
			return fmt.Errorf("%w: %s", ErrUnwritable, e.Error)
		}
	}
	return nil
}

// restartJetStream has JetStream reload every stream and consumer from
// the store, as it does at start: what it acknowledged is there, the
// writes that failed are not. It runs on the configuration JetStream
// started with: recomputed, the store's limit would come from the free
// space of a disk that has none, and refuse every write for good.
//
// The server's INFO to new clients says JetStream is off from here on (it
// sets that back only in its own restart); Astro and nats.go's JetStream
// API do not read it.
func (s *Server) restartJetStream() error {
	if err := s.ns.ShutdownJetStream(); err != nil {
		return fmt.Errorf("natsserver: stop JetStream: %w", err)
	}
	cfg := s.jetstream
	if err := s.ns.EnableJetStream(&cfg); err != nil {
		_ = s.ns.ShutdownJetStream() // what it started of it: the next check tries again
		return fmt.Errorf("natsserver: restart JetStream: %w", err)
	}
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
			// Twice in a row: a stream being created can fail the
			// check for a moment, and a write error stays.
			if reason == nil {
				backoff = interval
			}
			failed = reason != nil
			t.Reset(interval)
			continue
		}
		failed = false
		if err := s.restartJetStream(); err != nil {
			s.log.Error("the event log's store cannot take writes, and JetStream did not restart; trying again later", "reason", reason, "err", err)
		} else {
			s.log.Warn("restarted JetStream: the event log's store had failed a write, and writes failed until now", "reason", reason)
		}
		t.Reset(backoff)
		backoff = min(2*backoff, time.Minute)
	}
}
