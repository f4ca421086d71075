package projections_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"astro/events"
	"astro/projections"
)

// TestHolidayRenamesInOneBatch: a batch's renames are applied as one
// statement, the newest of each holiday; the result is what applying them
// one by one gives, also for a holiday created in the same batch, and a
// replayed older rename changes nothing.
func TestHolidayRenamesInOneBatch(t *testing.T) {
	db := migrated(t)
	ctx := context.Background()
	p, err := projections.NewHolidays(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	h1, h2 := "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"
	var seq uint64
	ev := func(ws, id string, pl events.Payload) events.Event {
		t.Helper()
		seq++
		e, err := events.New(fmt.Sprint("e", seq), events.Meta{WorkspaceID: ws, ActorID: "u1", Time: time.Now()},
			events.Aggregate{Kind: events.KindHoliday, ID: id}, pl)
		if err != nil {
			t.Fatal(err)
		}
		e.Seq = seq
		return e
	}
	created := func(ws, id string) events.Event {
		return ev(ws, id, events.HolidayCreated{HolidayID: id, Reason: "r0", Type: "global", DateFrom: "2027-01-01", DateTo: "2027-01-01"})
	}
	renamed := func(ws, id, from, to string) events.Event {
		return ev(ws, id, events.HolidayRenamed{HolidayID: id, OldReason: from, NewReason: to})
	}
	apply := func(evs ...events.Event) {
		t.Helper()
		tx, err := db.BeginTxx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if err := p.Apply(ctx, tx, evs); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	reason := func(ws, id string) (string, uint64) {
		t.Helper()
		var r string
		var s uint64
		if err := db.QueryRowContext(ctx, `SELECT reason, seq FROM holidays WHERE workspace_id = $1 AND id = $2`, ws, id).Scan(&r, &s); err != nil {
			t.Fatal(err)
		}
		return r, s
	}

	apply(created("w1", h2))
	first := renamed("w1", h2, "r0", "old")
	apply(
		created("w1", h1),
		renamed("w1", h1, "r0", "a"),
		first,
		renamed("w1", h1, "a", "b"),
		created("w2", h1), // the same id in another workspace
		renamed("w2", h1, "r0", "other"),
		renamed("w1", h2, "old", "new"),
	)
	for _, c := range []struct {
		ws, id, want string
		seq          uint64
	}{
		{"w1", h1, "b", 5}, {"w1", h2, "new", 8}, {"w2", h1, "other", 7},
	} {
		if got, s := reason(c.ws, c.id); got != c.want || s != c.seq {
			t.Errorf("%s/%s: %q at %d, want %q at %d", c.ws, c.id, got, s, c.want, c.seq)
		}
	}
	// A replay of the older rename leaves the newer name.
	apply(first)
	if got, _ := reason("w1", h2); got != "new" {
		t.Errorf("after replaying an older rename: %q, want %q", got, "new")
	}
}
