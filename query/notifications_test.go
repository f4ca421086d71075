package query_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"astro/events"
	"astro/projections"
	"astro/projections/pgtest"
	"astro/query"
)

// A page read while a rebuild switches the notifications tables waits and
// is answered. It read notification_counts before notifications, the other
// order from the switch's, and PostgreSQL ended it as a deadlock: a 500.
func TestPageReadDuringARebuildSwitch(t *testing.T) {
	db := pgtest.Open(t)
	ctx := t.Context()
	if err := projections.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `
		INSERT INTO notifications VALUES ('ws','u','10000000-0000-4000-8000-000000000001','s','t','sub','m',NULL,now(),NULL,1);
		INSERT INTO notification_counts (workspace_id, recipient_id, total, unread, seq) VALUES ('ws','u',1,1,1);
		CREATE SCHEMA build; CREATE SCHEMA retired;
		CREATE TABLE build.notifications (LIKE public.notifications INCLUDING ALL);
		CREATE TABLE build.notification_counts (LIKE public.notification_counts INCLUDING ALL);`); err != nil {
		t.Fatal(err)
	}
	q, err := query.NewNotifications(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	waiting := func(like string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			var n int
			if err := db.GetContext(ctx, &n, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`, like); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no statement like %q waits for a lock", like)
			}
			time.Sleep(10 * time.Millisecond) // polling, bounded by the deadline
		}
	}

	// A read under way holds the switch at its first table.
	reader, err := db.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback()
	if _, err := reader.ExecContext(ctx, `SELECT count(*) FROM notifications`); err != nil {
		t.Fatal(err)
	}
	switched := make(chan error, 1)
	go func() {
		sw, err := db.BeginTxx(ctx, nil)
		if err != nil {
			switched <- err
			return
		}
		defer sw.Rollback()
		for _, s := range []string{
			`SET LOCAL lock_timeout = '5s'`,
			`LOCK TABLE public.notifications, public.notification_counts IN EXCLUSIVE MODE`,
			`ALTER TABLE public.notifications SET SCHEMA retired`,
			`ALTER TABLE public.notification_counts SET SCHEMA retired`,
			`ALTER TABLE build.notifications SET SCHEMA public`,
			`ALTER TABLE build.notification_counts SET SCHEMA public`,
		} {
			if _, err := sw.ExecContext(ctx, s); err != nil {
				switched <- fmt.Errorf("%s: %w", s, err)
				return
			}
		}
		switched <- sw.Commit()
	}()
	waiting("ALTER TABLE public.notifications%")

	// A page read comes meanwhile.
	listed := make(chan error, 1)
	go func() {
		_, err := q.List(context.WithoutCancel(ctx), "ws", "u", query.NotificationFilter{})
		listed <- err
	}()
	waiting("%FROM notifications%")
	if err := reader.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-listed; err != nil {
		t.Fatalf("a page read during the switch: %v", err)
	}
	if err := <-switched; err != nil {
		t.Fatalf("the switch: %v", err)
	}
}

// An inbox is due for compaction once it has had enough events since its
// last compaction, or has had any and holds one older than the bound. An
// inbox idle since its compaction holds nothing of its own to erase: it is
// due only when idle ones are asked for (the turnover mode, where its live
// parts would keep their block, and what others removed in it, for good),
// and after every inbox with events, however much older it is, so that the
// round's limit never leaves those out for it.
func TestCompactionsDue(t *testing.T) {
	db := pgtest.Open(t)
	ctx := t.Context()
	if err := projections.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, r := range []struct {
		user   string
		events int
		oldest time.Time
	}{
		{"busy", 1000, now},
		{"old-change", 1, now.Add(-13 * time.Hour)},
		{"idle-since-compaction", 0, now.Add(-13 * time.Hour)},
		{"idle-for-long", 0, now.Add(-40 * time.Hour)},
		{"recent-change", 1, now.Add(-time.Hour)},
		{"recently-compacted", 0, now.Add(-time.Hour)},
	} {
		if _, err := db.ExecContext(ctx, `INSERT INTO notification_counts (workspace_id, recipient_id, total, unread, seq, events, oldest)
			VALUES ('ws', $1, 1, 0, 1, $2, $3)`, r.user, r.events, r.oldest); err != nil {
			t.Fatal(err)
		}
	}
	q, err := query.NewCompactions(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		idle  bool
		limit int
		want  string
	}{
		{"overwrite mode", false, 100, "[old-change busy]"},
		{"turnover mode", true, 100, "[old-change busy idle-for-long idle-since-compaction]"},
		{"turnover mode, a round too small for all", true, 3, "[old-change busy idle-for-long]"},
		{"turnover mode, a round too small for the changed ones", true, 1, "[old-change]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			due, err := q.Due(ctx, 1000, now.Add(-12*time.Hour), c.idle, c.limit)
			if err != nil {
				t.Fatal(err)
			}
			var users []string
			for _, in := range due {
				users = append(users, in.RecipientID)
			}
			if got := fmt.Sprint(users); got != c.want {
				t.Fatalf("due: %v, want %v", got, c.want)
			}
		})
	}
}

// A user's counts come from memory, at the position up to which the inbox
// stream went past, for as long as nothing of the user's inbox went past
// after they were read.
func TestCountsAsSeen(t *testing.T) {
	db := pgtest.Open(t)
	ctx := t.Context()
	if err := projections.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	seen := query.NewInboxesSeen()
	q, err := query.NewNotifications(ctx, db, seen)
	if err != nil {
		t.Fatal(err)
	}
	gen := seen.Started(0, 0)
	delivered := uint64(0)
	deliver := func(user string, seq uint64) {
		delivered++
		seen.Delivered(gen, events.Subject("ws", events.Aggregate{Kind: events.KindInbox, ID: user}), seq, delivered, true)
	}
	count := func(unread int, seq uint64) {
		t.Helper()
		if _, err := db.ExecContext(ctx, `INSERT INTO notification_counts (workspace_id, recipient_id, total, unread, seq) VALUES ('ws','u',$1,$1,$2)
			ON CONFLICT (workspace_id, recipient_id) DO UPDATE SET total = $1, unread = $1, seq = $2`, unread, seq); err != nil {
			t.Fatal(err)
		}
	}
	current := func(name string, wantUnread int, wantAt uint64) {
		t.Helper()
		c, at, ok := q.Current("ws", "u")
		if wantUnread < 0 {
			if ok {
				t.Fatalf("%s: %d unread at %d from memory, want none", name, c.Unread, at)
			}
			return
		}
		if !ok || c.Unread != wantUnread || at != wantAt {
			t.Fatalf("%s: %d unread at %d (%v), want %d at %d", name, c.Unread, at, ok, wantUnread, wantAt)
		}
	}

	deliver("u", 1)
	count(1, 1)
	current("never read", -1, 0)
	if _, err := q.Counts(ctx, "ws", "u", q.Mark(), 1); err != nil {
		t.Fatal(err)
	}
	current("read", 1, 1)
	deliver("v", 2)
	current("another user's event went past", 1, 2)
	deliver("u", 3)
	count(2, 3)
	current("its own event went past", -1, 0)
	mark := q.Mark()
	if _, ok := q.CachedCounts("ws", "u", mark, 3); ok {
		t.Fatal("counts cached at a position they were never read at")
	}
	if _, err := q.Counts(ctx, "ws", "u", mark, 3); err != nil {
		t.Fatal(err)
	}
	current("read again", 2, 3)
	seen.Stopped()
	current("deliveries stopped", -1, 0)
}
