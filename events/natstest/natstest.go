// Package natstest owns the NATS servers that tests use: a fresh in-process
// JetStream server per call, stored in the test's temp dir and shut down with
// the test; and the one reader of a whole event log that tests check
// against.
package natstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
	return ServerWith(t, natsserver.Config{})
}

// ServerWith is Server with cfg's settings; an empty StoreDir is
// t.TempDir and an empty Listen is in-process only.
func ServerWith(t testing.TB, cfg natsserver.Config) *natsserver.Server {
	t.Helper()
	if cfg.StoreDir == "" {
		cfg.StoreDir = t.TempDir()
	}
	if cfg.Listen == "" {
		cfg.Listen = "off"
	}
	s, err := natsserver.Start(t.Context(), cfg)
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
	return ConnTo(t, Server(t))
}

// ConnTo connects to s in-process; the connection is closed when the test
// ends, before the server shuts down.
func ConnTo(t testing.TB, s *natsserver.Server) *nats.Conn {
	t.Helper()
	nc, err := s.Connect()
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// ReadLog returns every event of the log on nc, at least as far as it went
// when the read began: the history stream's events in their order, then
// the inbox stream's in theirs (each stream has its own sequence). It
// binds the streams as they are (changing nothing) and scans them. A scan
// that fails, as an ordered consumer placed on a dead node of a degraded
// cluster does, is started again after the last event read, a bounded
// number of times; then the rest is read one message at a time from the
// stream leader.
func ReadLog(ctx context.Context, nc *nats.Conn) ([]events.Event, error) {
	l, err := natslog.Open(ctx, nc, natslog.Config{Bind: true, EventsOnly: true})
	if err != nil {
		return nil, fmt.Errorf("natstest: bind the log: %w", err)
	}
	var out []events.Event
	for _, kind := range []string{events.KindHoliday, events.KindInbox} {
		evs, err := readStream(ctx, l, kind)
		if err != nil {
			return nil, err
		}
		out = append(out, evs...)
	}
	return out, nil
}

func readStream(ctx context.Context, l *natslog.Log, kind string) ([]events.Event, error) {
	var out []events.Event
	last := uint64(0)
	keep := func(e events.Event) error {
		out, last = append(out, e), e.Seq
		return nil
	}
	all := events.SubjectPrefix + ".>" // the history stream, for Read
	if kind == events.KindInbox {
		all = events.KindSubjects(kind)
	}
	for resets := 0; ; resets++ {
		if resets > 5 {
			if _, err := l.Read(ctx, all, last, keep); err != nil {
				return nil, fmt.Errorf("natstest: read the %s stream after %d: %w", kind, last, err)
			}
			return out, nil
		}
		if resets > 0 {
			time.Sleep(250 * time.Millisecond) // let a cluster settle; bounded by the resets
		}
		scanCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := l.ScanStream(scanCtx, kind, events.ScanFrom{Seq: last + 1}, keep)
		cancel()
		if err == nil {
			return out, nil // to the end: a scan checks with the stream before it stops
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("natstest: read the %s stream after %d: %w", kind, last, err)
		}
	}
}

// FilesWith lists the files under dir that hold marker: what anyone with
// the disk of a log stored there would find. Files removed while it looks
// (a block JetStream drops) are skipped.
func FilesWith(t testing.TB, dir, marker string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(marker)) {
			found = append(found, path)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("natstest: search %s: %v", dir, err)
	}
	return found
}
