package natslog_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"astro/events"
	"astro/events/natslog"
	"astro/events/natstest"
)

// TestAppendWithoutTheLogFailsFast: a deleted stream fails an append at
// once, an unreachable server after RetryFor (a read of a position too),
// and neither waits for the caller's deadline. The
// caller's context here has none.
func TestAppendWithoutTheLogFailsFast(t *testing.T) {
	ctx := context.Background()
	e := renamed(t, "01a20000-0000-7000-8000-000000000001", "01a20000-0000-7000-8000-0000000000aa", "a", "b")
	subject := events.Subject(e.WorkspaceID, e.Aggregate)

	t.Run("stream deleted", func(t *testing.T) {
		l, _, js := withoutHistory(t)
		if _, err := l.Append(ctx, subject, 0, e); !errors.Is(err, natslog.ErrStreamMissing) {
			t.Fatalf("append: %v, want ErrStreamMissing", err)
		}
		if err := l.Ping(ctx); !errors.Is(err, natslog.ErrStreamMissing) {
			t.Fatalf("ping: %v, want ErrStreamMissing", err)
		}
		if _, err := js.Stream(ctx, "ASTRO_HISTORY"); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Fatalf("the stream came back: %v", err)
		}
	})

	t.Run("server gone", func(t *testing.T) {
		srv := natstest.Server(t)
		nc, err := srv.Connect(nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		l, err := natslog.Open(ctx, nc, natslog.Config{RetryFor: 500 * time.Millisecond, AttemptTimeout: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		srv.Shutdown()
		if _, err := l.Append(ctx, subject, 0, e); !errors.Is(err, natslog.ErrUnreachable) {
			t.Fatalf("append: %v, want ErrUnreachable", err)
		}
		// Reads asking together share rounds, and each still fails
		// rather than wait for a deadline of its own.
		errs := make(chan error, 8)
		for range cap(errs) {
			go func() {
				_, err := l.LastSeq(ctx, subject)
				errs <- err
			}()
		}
		for range cap(errs) {
			if err := <-errs; err == nil {
				t.Fatal("LastSeq answered without a server")
			}
		}
	})
}

// TestOpenNeverRecreatesALostStream: told that the log existed, Open
// refuses to create it.
func TestOpenNeverRecreatesALostStream(t *testing.T) {
	nc := natstest.Conn(t)
	ctx := t.Context()
	if _, err := natslog.Open(ctx, nc, natslog.Config{MustExist: true}); !errors.Is(err, natslog.ErrStreamMissing) {
		t.Fatalf("open: %v, want ErrStreamMissing", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(ctx, "ASTRO_HISTORY"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("a stream was created: %v", err)
	}
	// Existing, it opens as ever.
	if _, err := natslog.Open(ctx, nc, natslog.Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := natslog.Open(ctx, nc, natslog.Config{MustExist: true}); err != nil {
		t.Fatalf("open an existing log: %v", err)
	}
}

// TestUnansweredPublishIsRetried: a publish that gets no answer, as during
// a stream leader's election, is tried again under the same id within
// RetryFor, with the defaults production uses. The "stream" here is a
// subscriber in place of the deleted one that ignores the first publish.
func TestUnansweredPublishIsRetried(t *testing.T) {
	ctx := t.Context()
	l, nc, _ := withoutHistory(t)
	e := renamed(t, "01a20000-0000-7000-8000-000000000002", "01a20000-0000-7000-8000-0000000000ab", "a", "b")
	subject := events.Subject(e.WorkspaceID, e.Aggregate)
	ids := make(chan string, 100)
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		ids <- m.Header.Get(nats.MsgIdHdr)
		if len(ids) == 1 {
			return // the first publish lands during an election
		}
		if err := m.Respond([]byte(`{"stream":"ASTRO_HISTORY","seq":7}`)); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	seq, err := l.Append(ctx, subject, 0, e)
	if err != nil || seq != 7 {
		t.Fatalf("append: seq %d, %v after %d publishes; want seq 7 after a retry", seq, err, len(ids))
	}
	close(ids)
	n := 0
	for id := range ids {
		if n++; id != e.ID {
			t.Fatalf("publish %d has id %q, want %q: a retry must be recognised as one", n, id, e.ID)
		}
	}
	if n != 2 {
		t.Fatalf("%d publishes, want 2", n)
	}
}

// withoutHistory is a log whose history stream was deleted under it.
func withoutHistory(t *testing.T) (*natslog.Log, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	l, nc := openLog(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(t.Context(), "ASTRO_HISTORY"); err != nil {
		t.Fatal(err)
	}
	return l, nc, js
}
