package natslog_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"astro/events"
	"astro/events/natslog"
	"astro/events/natsserver"
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

// BenchmarkAppendSyncAlways: appends on a log that fsyncs every append
// (ASTRO_LOG_SYNC=always), from 1 and 32 writers on their own aggregates,
// as a fraction of the raw cap: plain JetStream publishes from as many
// writers to the same store, measured in the same run ("x-raw-cap" is
// Astro's appends per second over the raw publishes per second). JetStream
// syncs each append in turn, so the raw cap, not PostgreSQL's grouped
// commits, bounds this durability class.
func BenchmarkAppendSyncAlways(b *testing.B) {
	for _, writers := range []int{1, 32} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			srv, err := natsserver.Start(b.Context(), natsserver.Config{StoreDir: b.TempDir(), Listen: "off", SyncAlways: true})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(srv.Shutdown)
			nc, err := srv.Connect()
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(nc.Close)
			l, err := natslog.Open(b.Context(), nc, natslog.Config{})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			js := l.JetStream()
			e := renamedB(b, "h0")
			n := max(b.N, writers)
			raw := inParallel(b, writers, n, func(w, i int) error {
				_, err := js.Publish(ctx, fmt.Sprint("astro.events.raw.holiday.h", w), e.Data)
				return err
			})
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
		})
	}
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
