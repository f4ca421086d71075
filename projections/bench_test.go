package projections_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/nats-io/nats.go/jetstream"

	"astro/events"
	"astro/events/natslog"
	"astro/events/natstest"
	"astro/projections"
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

// BenchmarkRebuildRate: events per second a rebuild of the notifications
// read model applies from a JetStream log of 1,000,000 events (reading,
// decoding and applying them, checkpoint included), as events/s and as a
// ratio to a raw batched PostgreSQL upsert of the same rows, from memory,
// in batches of the same size, measured in the same run ("x-raw-upsert").
// The log is written once, by asynchronous publishes. Run it alone:
//
//	go test ./projections -run '^$' -bench RebuildRate -benchtime 1x
func BenchmarkRebuildRate(b *testing.B) {
	const total, batch = 1_000_000, 20000
	ctx := context.Background()
	l, err := natslog.Open(ctx, natstest.Conn(b), natslog.Config{})
	if err != nil {
		b.Fatal(err)
	}
	js, err := jetstream.New(l.JetStream().Conn(), jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		b.Fatal(err)
	}
	// What the baseline writes: the rows the sends make, as column arrays.
	type rows struct {
		ws, recipient, id, subject, message, created []string
		seq                                          []int64
	}
	var raw rows
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range total {
		ws, user := fmt.Sprintf("w%d", i%10), fmt.Sprintf("u%d", i%10000)
		when := at.Add(time.Duration(i) * time.Millisecond)
		sent := events.NotificationSent{NotificationID: events.NewID(when), RecipientID: user, SenderID: "s" + fmt.Sprint(i%7),
			NotificationType: "task.assigned", Subject: "Task assigned", Message: fmt.Sprintf("You were assigned task %d", i), CreateDate: when}
		e, err := events.New(events.NewID(when), events.Meta{WorkspaceID: ws, ActorID: "svc", Time: when},
			events.Aggregate{Kind: events.KindInbox, ID: user}, sent)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := js.PublishMsgAsync(natslog.Encode(e)); err != nil {
			b.Fatal(err)
		}
		if i%2000 == 1999 { // a window of acknowledgements outstanding, not the whole log
			<-js.PublishAsyncComplete()
		}
		raw.ws, raw.recipient, raw.id = append(raw.ws, ws), append(raw.recipient, user), append(raw.id, sent.NotificationID)
		raw.subject, raw.message = append(raw.subject, sent.Subject), append(raw.message, sent.Message)
		raw.created, raw.seq = append(raw.created, when.Format(time.RFC3339Nano)), append(raw.seq, int64(i+1))
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		b.Fatal("publishing the log did not finish")
	}
	info, err := l.JetStream().Stream(ctx, l.Stream(events.KindInbox))
	if err != nil || info.CachedInfo().State.Msgs != total {
		b.Fatalf("log holds %d events (%v), want %d", info.CachedInfo().State.Msgs, err, total)
	}

	db := migratedB(b)
	baseline := migratedB(b)
	upsert, err := baseline.Preparex(`INSERT INTO notifications (workspace_id, recipient_id, id, sender_id, notification_type, subject, message, create_date, seq)
		SELECT ws, r, id, 's', 'task.assigned', subj, msg, at, seq FROM unnest($1::text[], $2::text[], $3::uuid[], $4::text[], $5::text[], $6::timestamptz[], $7::bigint[])
			AS d(ws, r, id, subj, msg, at, seq)
		ON CONFLICT (workspace_id, recipient_id, id) DO UPDATE SET subject = EXCLUDED.subject, message = EXCLUDED.message, seq = EXCLUDED.seq`)
	if err != nil {
		b.Fatal(err)
	}
	// The baseline runs before and after the rebuild, and counts for the
	// two: a load on the machine that changes meanwhile weighs on both.
	var rawTime time.Duration
	upsertAll := func() {
		if _, err := baseline.Exec(`TRUNCATE notifications`); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for lo := 0; lo < total; lo += batch {
			hi := min(lo+batch, total)
			tx, err := baseline.Beginx()
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tx.Exec(`SET LOCAL synchronous_commit TO off`); err != nil {
				b.Fatal(err)
			}
			if _, err := tx.Stmtx(upsert).Exec(pq.Array(raw.ws[lo:hi]), pq.Array(raw.recipient[lo:hi]), pq.Array(raw.id[lo:hi]),
				pq.Array(raw.subject[lo:hi]), pq.Array(raw.message[lo:hi]), pq.Array(raw.created[lo:hi]), pq.Array(raw.seq[lo:hi])); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
		rawTime += time.Since(start)
	}

	b.ResetTimer()
	upsertAll()
	var rebuildTime time.Duration
	var applied int64
	for range b.N {
		// The live read model claims the whole log, so the rebuild goes to
		// its end; it is empty, so the switch has to be forced. The rate is
		// taken when the building ends (indexes included), before the
		// comparison.
		if _, err := db.Exec(`INSERT INTO projector_checkpoints (name, seq) VALUES ('notifications', $1)
			ON CONFLICT (name) DO UPDATE SET seq = EXCLUDED.seq`, total); err != nil {
			b.Fatal(err)
		}
		if _, err := db.Exec(`TRUNCATE notifications, notification_counts`); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		var built time.Duration
		res, err := projections.Rebuild(ctx, l.JetStream(), db, notificationsProjector(b, db), projections.RebuildConfig{
			Stream: l.Stream(events.KindInbox), Batch: batch, Force: true, MaxDiffs: 1,
			Progress: func(p projections.Progress) {
				if p.Phase == "comparing" && built == 0 {
					built = time.Since(start)
				}
			}})
		if err != nil || !res.Switched || res.Applied != total {
			b.Fatalf("rebuild: %+v, %v", res, err)
		}
		rebuildTime += built
		applied += res.Applied
	}
	upsertAll()
	rate := float64(applied) / rebuildTime.Seconds()
	rawRate := float64(2*total) / rawTime.Seconds()
	b.ReportMetric(rate, "events/s")
	b.ReportMetric(rawRate, "raw-rows/s")
	b.ReportMetric(rate/rawRate, "x-raw-upsert")
}
