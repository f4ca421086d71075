package natslog_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"astro/events"
	"astro/events/natslog"
	"astro/events/natsserver"
	"astro/events/natstest"
)

// perOp times n runs of op.
func perOp(n int, op func(i int)) time.Duration {
	start := time.Now()
	for i := range n {
		op(i)
	}
	return time.Since(start) / time.Duration(n)
}

// BenchmarkAppend: one event with optimistic concurrency and de-duplication,
// against a raw JetStream publish of the same bytes to the same stream,
// measured in the same run ("x-raw-publish" is the ratio).
func BenchmarkAppend(b *testing.B) {
	l, _ := openLogB(b)
	ctx := context.Background()
	js := l.JetStream()
	e := renamedB(b, "h0")
	raw := perOp(b.N, func(i int) {
		if _, err := js.Publish(ctx, "astro.events.raw.holiday.h", e.Data); err != nil {
			b.Fatal(err)
		}
	})
	subject := events.Subject("w1", e.Aggregate)
	var last uint64
	b.ResetTimer()
	own := perOp(b.N, func(i int) {
		e.ID = fmt.Sprint(i)
		var err error
		if last, err = l.Append(ctx, subject, last, e); err != nil {
			b.Fatal(err)
		}
	})
	b.ReportMetric(float64(own)/float64(raw), "x-raw-publish")
}

// BenchmarkAppendSyncAlways: appends on a log that makes every append
// durable before answering it (ASTRO_LOG_SYNC=always), from 1 and 32
// writers on their own aggregates, against the cap JetStream's own
// sync_always sets: plain publishes from as many writers to a server that
// fsyncs each one in turn, measured in the same run ("x-raw-cap" is
// Astro's appends per second over those publishes per second). Astro's
// embedded server groups the fsyncs of concurrent appends, so past one
// writer it is not bound by that cap.
func BenchmarkAppendSyncAlways(b *testing.B) {
	for _, writers := range []int{1, 32} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			ctx := context.Background()
			e := renamedB(b, "h0")
			n := max(b.N, writers)
			js := rawSyncAlways(b)
			raw := inParallel(b, writers, n, func(w, i int) error {
				_, err := js.Publish(ctx, fmt.Sprint("astro.events.raw.holiday.h", w), e.Data)
				return err
			})

			srv := natstest.ServerWith(b, natsserver.Config{SyncAlways: true})
			l, err := natslog.Open(b.Context(), natstest.ConnTo(b, srv), natslog.Config{Sync: srv.Sync})
			if err != nil {
				b.Fatal(err)
			}
			last := make([]uint64, writers)
			b.ResetTimer()
			own := inParallel(b, writers, n, func(w, i int) error {
				ev := e
				ev.ID = fmt.Sprint(w, "-", i)
				ev.Aggregate.ID = fmt.Sprint("h", w)
				var err error
				last[w], err = l.Append(ctx, events.Subject("w1", ev.Aggregate), last[w], ev)
				return err
			})
			b.ReportMetric(float64(raw)/float64(own), "x-raw-cap")
			b.ReportMetric(float64(n)/own.Seconds(), "appends/s")
			b.ReportMetric(float64(n)/raw.Seconds(), "raw-publishes/s")
		})
	}
}

// rawSyncAlways is a JetStream server of b's that fsyncs every message
// before acknowledging it (its own sync_always), with one stream for
// astro.events.raw.>.
func rawSyncAlways(b *testing.B) jetstream.JetStream {
	b.Helper()
	ns, err := server.NewServer(&server.Options{JetStream: true, StoreDir: b.TempDir(), DontListen: true, NoSigs: true, SyncAlways: true})
	if err != nil {
		b.Fatal(err)
	}
	ns.Start()
	b.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		b.Fatal("raw server not ready")
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "RAW", Subjects: []string{"astro.events.raw.>"}, Storage: jetstream.FileStorage}); err != nil {
		b.Fatal(err)
	}
	return js
}

// inParallel runs n operations spread over writers goroutines and returns
// how long they all took.
func inParallel(b *testing.B, writers, n int, op func(w, i int) error) time.Duration {
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += writers {
				if err := op(w, i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}
