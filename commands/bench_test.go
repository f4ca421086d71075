package commands_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"astro/commands"
	"astro/commands/notifications"
)

func perOp(n int, op func(i int)) time.Duration {
	start := time.Now()
	for i := range n {
		op(i)
	}
	return time.Since(start) / time.Duration(n)
}

// BenchmarkCommandColdLoad: a command on an inbox no instance has cached
// (a restart, another instance), for histories of different lengths. The
// cost must not grow with the history: the snapshot holds it. Reported as
// a ratio to a raw JetStream publish measured in the same run, and the
// events read to load.
func BenchmarkCommandColdLoad(b *testing.B) {
	for _, history := range []int{10, 1000, 5000} {
		b.Run(fmt.Sprintf("history=%d", history), func(b *testing.B) {
			l := newLog(b)
			ctx := context.Background()
			svc := commands.Caller{UserID: "svc", WorkspaceID: "w1", Scopes: []string{notifications.ScopeSend}}
			newHandlers := func(log commands.Log) *notifications.Handlers {
				store, err := commands.NewStore(log, l.Snapshots(), notifications.NewInbox, commands.StoreConfig{Name: "inbox.bench"})
				if err != nil {
					b.Fatal(err)
				}
				h, err := notifications.NewHandlers(store, time.Now)
				if err != nil {
					b.Fatal(err)
				}
				return h
			}
			warm := newHandlers(l)
			send := notifications.Send{Caller: svc, RecipientID: "alice", SenderID: "0000b0b0-0000-4000-8000-000000000001", NotificationType: "t", Subject: "s"}
			for range history {
				if _, _, err := warm.Send.Handle(ctx, send); err != nil {
					b.Fatal(err)
				}
			}
			js := l.JetStream()
			raw := perOp(b.N, func(int) {
				if _, err := js.Publish(ctx, "astro.events.raw.inbox.x", []byte(`{"notificationId":"x"}`)); err != nil {
					b.Fatal(err)
				}
			})
			counting := &countingLog{Log: l}
			b.ResetTimer()
			own := perOp(b.N, func(int) {
				if _, _, err := newHandlers(counting).Send.Handle(ctx, send); err != nil {
					b.Fatal(err)
				}
			})
			b.ReportMetric(float64(own)/float64(raw), "x-raw-publish")
			b.ReportMetric(float64(counting.read)/float64(b.N), "events-read/op")
		})
	}
}

// BenchmarkCommandWarm: the common case, an aggregate in the cache.
func BenchmarkCommandWarm(b *testing.B) {
	l := newLog(b)
	ctx := context.Background()
	store, err := commands.NewStore(l, l.Snapshots(), notifications.NewInbox, commands.StoreConfig{Name: "inbox.bench"})
	if err != nil {
		b.Fatal(err)
	}
	h, _ := notifications.NewHandlers(store, time.Now)
	svc := commands.Caller{UserID: "svc", WorkspaceID: "w1", Scopes: []string{notifications.ScopeSend}}
	js := l.JetStream()
	raw := perOp(b.N, func(int) {
		if _, err := js.Publish(ctx, "astro.events.raw.inbox.x", []byte(`{"notificationId":"x"}`)); err != nil {
			b.Fatal(err)
		}
	})
	send := notifications.Send{Caller: svc, RecipientID: "alice", SenderID: "0000b0b0-0000-4000-8000-000000000001", NotificationType: "t", Subject: "s"}
	b.ResetTimer()
	own := perOp(b.N, func(int) {
		if _, _, err := h.Send.Handle(ctx, send); err != nil {
			b.Fatal(err)
		}
	})
	b.ReportMetric(float64(own)/float64(raw), "x-raw-publish")
}
