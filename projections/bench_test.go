package projections_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"astro/events"
)

// BenchmarkProjectSends: per-event cost of projecting NotificationSent in
// batches, against one raw PostgreSQL round trip (SELECT 1) measured in the
// same run ("x-pg-roundtrip"). Below 1 means batching beats a round trip per
// event.
func BenchmarkProjectSends(b *testing.B) {
	for _, batch := range []int{1, 100, 500} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			db := migratedB(b)
			ctx := context.Background()
			p := notificationsProjector(b, db)
			start := time.Now()
			for range b.N {
				var one int
				if err := db.GetContext(ctx, &one, `SELECT 1`); err != nil {
					b.Fatal(err)
				}
			}
			roundTrip := time.Since(start) / time.Duration(b.N)

			evs := make([]events.Event, b.N)
			for i := range evs {
				e, err := events.New(fmt.Sprint(i), events.Meta{WorkspaceID: "w1", ActorID: "svc", Time: time.Now()},
					events.Aggregate{Kind: events.KindInbox, ID: "u1"},
					events.NotificationSent{NotificationID: events.NewID(time.Now()), RecipientID: "u1", SenderID: "s",
						NotificationType: "t", Subject: "subject", Message: "message", Data: []byte(`{"k":1}`), CreateDate: time.Now()})
				if err != nil {
					b.Fatal(err)
				}
				e.Seq = uint64(i + 1)
				evs[i] = e
			}
			b.ResetTimer()
			start = time.Now()
			for lo := 0; lo < len(evs); lo += batch {
				tx, err := db.BeginTxx(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				if err := p.Apply(ctx, tx, evs[lo:min(lo+batch, len(evs))]); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
			}
			perEvent := time.Since(start) / time.Duration(b.N)
			b.ReportMetric(float64(perEvent)/float64(roundTrip), "x-pg-roundtrip")
		})
	}
}
