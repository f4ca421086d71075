package query

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"astro/commands"
	"astro/projections"
	"astro/projections/pgtest"
)

// The workload of issue 14: a member creates people holidays of the most a
// holiday allows (1,000 resources for 366 days); twenty of them in one
// workspace are 7.3 million resource-days.
const (
	bigResources = 1000
	bigHolidays  = 20
)

// bigWorkspace fills the read model straight, as the projector would have.
func bigWorkspace(tb testing.TB) *sqlx.DB {
	tb.Helper()
	db := pgtest.Open(tb)
	ctx := context.Background()
	if err := projections.Migrate(ctx, db); err != nil {
		tb.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO resources (workspace_id, id, name, country_code, is_active, is_guest, seq)
		SELECT 'big', 'r' || lpad(i::text, 4, '0'), 'Person ' || i, 'GB', true, false, i FROM generate_series(1, $1) AS i`, bigResources); err != nil {
		tb.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO holidays (workspace_id, id, reason, type, date_from, date_to, resource_ids, created_seq, seq)
		SELECT 'big', ('00000000-0000-4000-8000-' || lpad(h::text, 12, '0'))::uuid, 'Leave ' || h, 'people', '2028-01-01', '2028-12-31',
			ARRAY(SELECT 'r' || lpad(i::text, 4, '0') FROM generate_series(1, $1) AS i), 10000 + h, 10000 + h
		FROM generate_series(1, $2) AS h`, bigResources, bigHolidays); err != nil {
		tb.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `ANALYZE resources; ANALYZE holidays`); err != nil {
		tb.Fatal(err)
	}
	return db
}

// TestListTimeoutStopsAnExpensiveList: a list that must expand and sort
// every resource-day stops at its statement_timeout and answers 503, not a
// connection held for the whole request, nor a 500.
func TestListTimeoutStopsAnExpensiveList(t *testing.T) {
	db := bigWorkspace(t)
	q, err := NewHolidays(t.Context(), db, HolidaysConfig{ListTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = q.Resource(t.Context(), "big", ListOptions{OrderBy: "resourceId desc", Top: "10"})
	if code := commands.ErrorCode(err); code != commands.EUnavailable {
		t.Fatalf("an expensive list: %v (code %s), want %s", err, code, commands.EUnavailable)
	}
	t.Logf("stopped after %v", time.Since(start))
	// The pool's connection is back to the default: a plain query runs.
	var n int
	if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM pg_sleep(0.1)`).Scan(&n); err != nil {
		t.Fatalf("the timeout outlived its list: %v", err)
	}
}

// TestResourceListExpandsOnlyWhatAPageReaches holds the plans of pages in
// the default order to the rows they can reach: no node of the plan may
// produce more rows than the page's $top+$skip plus one day's rows (20,000
// here), where the full expansion produced 7.3 million. Run with -v for
// the plans and their timings.
func TestResourceListExpandsOnlyWhatAPageReaches(t *testing.T) {
	db := bigWorkspace(t)
	q, err := NewHolidays(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	const oneDay = bigHolidays * bigResources
	actual := regexp.MustCompile(`actual rows=(\d+)`)
	for _, o := range []ListOptions{{Top: "10"}, {Top: "10", Skip: "100000"}, {Top: "1000", Skip: "1000000"}} {
		sql, args, err := q.resource.build("big", o)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := db.QueryContext(t.Context(), "EXPLAIN (ANALYZE, BUFFERS OFF, TIMING OFF) "+sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		most := 0
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
			for _, m := range actual.FindAllStringSubmatch(line, -1) {
				n, _ := strconv.Atoi(m[1])
				most = max(most, n)
			}
		}
		rows.Close()
		top, _ := strconv.Atoi(o.Top)
		skip, _ := strconv.Atoi(o.Skip)
		t.Logf("%+v: at most %d rows in a node\n%s", o, most, strings.Join(plan, "\n"))
		if most > top+skip+oneDay {
			t.Errorf("$top=%s $skip=%s: a node of the plan produced %d rows, more than the %d the page can reach", o.Top, o.Skip, most, top+skip+oneDay)
		}
	}
}

// BenchmarkResourceList is the list latency on the big workspace, as a
// ratio to one PostgreSQL round trip (SELECT 1) measured in the same run.
func BenchmarkResourceList(b *testing.B) {
	db := bigWorkspace(b)
	q, err := NewHolidays(context.Background(), db, HolidaysConfig{ListTimeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	// The fastest of a few batches: this machine is shared and noisy, and
	// a round trip is short enough for one hiccup to double it.
	roundTrip := func() time.Duration {
		const n = 200
		best := time.Duration(1 << 62)
		for range 5 {
			start := time.Now()
			for range n {
				var one int
				if err := db.QueryRowContext(context.Background(), `SELECT 1`).Scan(&one); err != nil {
					b.Fatal(err)
				}
			}
			best = min(best, time.Since(start)/n)
		}
		return best
	}
	for _, c := range []struct {
		name string
		o    ListOptions
	}{
		{"top=10", ListOptions{Top: "10"}},
		{"top=10,skip=100000", ListOptions{Top: "10", Skip: "100000"}},
		{"top=10,filter=date", ListOptions{Top: "10", Filter: "date ge 2028-06-01 and date le 2028-06-02"}},
		// A $filter true of every row takes the full expansion: the plan
		// every page had before the cut.
		{"top=10,full-expansion", ListOptions{Top: "10", Filter: "date ge 1900-01-01"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			base := roundTrip()
			b.ResetTimer()
			for b.Loop() {
				if _, err := q.Resource(context.Background(), "big", c.o); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			per := b.Elapsed() / time.Duration(b.N)
			b.ReportMetric(float64(per)/float64(base), "x-roundtrip")
			b.ReportMetric(float64(base.Microseconds()), "µs-roundtrip")
		})
	}
}

// TestResourceListCutMatchesFullExpansion: the page of the cut expansion
// (no $filter, no $orderby) is the page of the full one, on a workspace of
// every kind of holiday, overlapping, out of scope and undated ones among
// them. A $filter true of every row forces the full expansion.
func TestResourceListCutMatchesFullExpansion(t *testing.T) {
	db := pgtest.Open(t)
	ctx := t.Context()
	if err := projections.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO resources (workspace_id, id, name, country_code, is_active, is_guest, seq)
		SELECT 'mix', 'r' || i, 'P', (ARRAY['GB','DE','FR'])[1 + i % 3], i % 7 <> 0, i % 11 = 0, i FROM generate_series(1, 40) AS i`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO holidays (workspace_id, id, reason, type, date_from, date_to, country_ids, resource_ids, created_seq, seq)
		SELECT 'mix', ('00000000-0000-4000-8000-' || lpad(h::text, 12, '0'))::uuid, 'H', (ARRAY['people','global','country'])[1 + h % 3],
			CASE WHEN h = 5 THEN NULL ELSE date '2028-01-01' + (h * 7) % 40 END,
			CASE WHEN h IN (5, 8) THEN NULL ELSE date '2028-01-01' + (h * 7) % 40 + h % 9 END, -- 8: a start and no end, as an older Astro stored
			CASE WHEN h % 3 = 2 THEN ARRAY[(ARRAY['GB','DE','FR'])[1 + h % 3], 'DE'] ELSE '{}' END,
			CASE WHEN h % 3 = 0 THEN ARRAY(SELECT 'r' || i FROM generate_series(h % 5, 40, 1 + h % 4) AS i) ELSE '{}' END,
			h, h
		FROM generate_series(1, 30) AS h`); err != nil {
		t.Fatal(err)
	}
	q, err := NewHolidays(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	all, err := q.Resource(ctx, "mix", ListOptions{Top: "1000", Filter: "date ge 1900-01-01"})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 500 {
		t.Fatalf("the fixture has only %d rows", len(all))
	}
	for _, page := range [][2]int{{1, 0}, {10, 0}, {7, 3}, {100, 37}, {50, len(all) - 20}, {10, len(all)}, {1000, 0}, {3, len(all) - 1}} {
		cutMatchesFull(t, q, "mix", fmt.Sprint(page[0]), fmt.Sprint(page[1]))
	}
}

// cutMatchesFull checks that a page of workspace ws's resource list is the
// same from the cut expansion (no $filter, no $orderby) as from the full
// one, which a $filter true of every row forces.
func cutMatchesFull(t *testing.T, q *Holidays, ws, top, skip string) {
	t.Helper()
	ctx := t.Context()
	cut, err := q.Resource(ctx, ws, ListOptions{Top: top, Skip: skip})
	if err != nil {
		t.Fatalf("$top=%s $skip=%s: %v", top, skip, err)
	}
	full, err := q.Resource(ctx, ws, ListOptions{Top: top, Skip: skip, Filter: "date ge 1900-01-01"})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(cut) != fmt.Sprint(full) {
		t.Errorf("$top=%s $skip=%s: cut expansion\n%v\nfull expansion\n%v", top, skip, cut, full)
	}
}

// A holiday an older Astro stored with a start and no end has no days: the
// resource list's cut leaves it out as the full expansion does, and a
// list of fewer rows than a page (nothing to cut at) still answers.
func TestResourceListOfAHolidayWithoutAnEnd(t *testing.T) {
	db := pgtest.Open(t)
	ctx := t.Context()
	if err := projections.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO resources (workspace_id, id, name, country_code, is_active, is_guest, seq)
		VALUES ('old', 'r1', 'P', 'GB', true, false, 1), ('old', 'r2', 'P', 'GB', true, false, 2)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO holidays (workspace_id, id, reason, type, date_from, date_to, country_ids, resource_ids, created_seq, seq)
		VALUES ('old', '00000000-0000-4000-8000-000000000001', 'Open-ended', 'global', date '2028-01-01', NULL, '{}', '{}', 3, 3),
		       ('old', '00000000-0000-4000-8000-000000000002', 'One day', 'global', date '2028-01-02', date '2028-01-02', '{}', '{}', 4, 4)`); err != nil {
		t.Fatal(err)
	}
	q, err := NewHolidays(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	for _, top := range []string{"1", "10"} {
		cutMatchesFull(t, q, "old", top, "")
	}
}
