package natslog_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"astro/events"
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
	for _, size := range []int{1, 2} {
		b.Run(fmt.Sprintf("events=%d", size), func(b *testing.B) {
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
				evs := make([]events.Event, size)
				for k := range evs {
					evs[k] = e
					evs[k].ID = fmt.Sprint(i, "-", k)
				}
				var err error
				if last, err = l.Append(ctx, subject, last, evs); err != nil {
					b.Fatal(err)
				}
			})
			b.ReportMetric(float64(own)/float64(raw), "x-raw-publish")
		})
	}
}
