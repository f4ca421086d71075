package pgconn_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"astro/projections/pgconn"
	"astro/projections/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// A call whose context ends while the database is silent returns at once,
// however far it got; the connections it broke are dropped and the pool
// works again once the database answers again. lib/pq alone waits on the
// silent socket until TCP gives up.
func TestCallOnASilentDatabaseEndsWithItsContext(t *testing.T) {
	cases := []struct {
		name string
		// call freezes the database at its point and makes the call that
		// must end with ctx.
		call func(ctx context.Context, t *testing.T, db *sqlx.DB, freeze func()) error
	}{
		{"connect", func(ctx context.Context, t *testing.T, db *sqlx.DB, freeze func()) error {
			freeze()
			return db.PingContext(ctx)
		}},
		{"query", func(ctx context.Context, t *testing.T, db *sqlx.DB, freeze func()) error {
			freeze()
			var n int
			return db.GetContext(ctx, &n, `SELECT 1`)
		}},
		{"prepared query", func(ctx context.Context, t *testing.T, db *sqlx.DB, freeze func()) error {
			stmt, err := db.PreparexContext(ctx, `SELECT $1::int`)
			if err != nil {
				return err
			}
			defer stmt.Close()
			freeze()
			var n int
			return stmt.GetContext(ctx, &n, 1)
		}},
		{"rows being read", func(ctx context.Context, t *testing.T, db *sqlx.DB, freeze func()) error {
			rows, err := db.QueryContext(ctx, `SELECT generate_series(1, 100000000)`)
			if err != nil {
				return err
			}
			defer rows.Close()
			for i := 0; rows.Next(); i++ {
				if i == 10 {
					freeze()
				}
			}
			if err := rows.Err(); err != nil {
				return err
			}
			return errors.New("read every row of a frozen database")
		}},
		{"commit", func(ctx context.Context, t *testing.T, db *sqlx.DB, freeze func()) error {
			tx, err := db.BeginTxx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `CREATE TABLE t (n int)`); err != nil {
				return err
			}
			freeze()
			return tx.Commit()
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, url := pgtest.NewFreezer(t, pgtest.URL(t))
			db, err := pgconn.Open(url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			if tc.name != "connect" {
				if err := db.PingContext(t.Context()); err != nil {
					t.Fatal(err)
				}
			}

			// The deadline covers the call's start too, which a loaded CI
			// run under the race detector has taken seconds over: a call
			// that ran out of time before the freeze tested nothing, and
			// runs again with twice the time.
			for limit := 2 * time.Second; ; limit *= 2 {
				ctx, cancel := context.WithTimeout(t.Context(), limit)
				var frozenAt time.Time
				done := make(chan error, 1)
				go func() {
					done <- tc.call(ctx, t, db, func() { frozenAt = time.Now(); f.Freeze() })
				}()
				var err error
				select {
				case err = <-done:
				case <-time.After(limit + 20*time.Second):
					t.Fatalf("the call with a %v context is still blocked 20 s after its deadline", limit)
				}
				cancel()
				if frozenAt.IsZero() {
					if limit >= 16*time.Second {
						t.Fatalf("the call ended before the database froze, %v into it: %v", limit, err)
					}
					t.Logf("the call ended before the database froze, %v into it: %v; again", limit, err)
					continue
				}
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("the call on a frozen database returned %v, want its context's deadline", err)
				}
				t.Logf("returned %v after the freeze: %v", time.Since(frozenAt).Round(time.Millisecond), err)
				break
			}

			f.Thaw()
			for i := range 40 {
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				var n int
				err := db.GetContext(ctx, &n, `SELECT $1::int`, i)
				cancel()
				if err != nil || n != i {
					t.Fatalf("query %d once the database answers again: %d, %v", i, n, err)
				}
			}
		})
	}
}

// A prepared statement's call whose context ends on a live server ends by
// lib/pq's CancelRequest, as PostgreSQL's 57014, and keeps its connection,
// as lib/pq alone does: failing its socket at once dropped it, and every
// request a client left cost a new connection and its authentication.
func TestCancelledStatementOnALiveServerKeepsItsConnection(t *testing.T) {
	db, err := pgconn.Open(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	pid := func() int {
		t.Helper()
		var pid int
		if err := db.Get(&pid, `SELECT pg_backend_pid()`); err != nil {
			t.Fatal(err)
		}
		return pid
	}
	before := pid()
	st, err := db.Preparex(`SELECT pg_sleep(2)`)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err = st.ExecContext(ctx)
	cancel()
	var pqErr *pq.Error
	if !errors.As(err, &pqErr) || pqErr.Code != "57014" {
		t.Errorf("the cancelled call: %v, want PostgreSQL's query_canceled", err)
	}
	if after := pid(); after != before {
		t.Errorf("the connection was dropped: backend %d, then %d", before, after)
	}
}

// lib/pq's COPY FROM STDIN is a statement without the context methods.
func TestCopyIn(t *testing.T) {
	db, err := pgconn.Open(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TEMP TABLE copied (a int)`); err != nil {
		t.Fatal(err)
	}
	st, err := tx.PrepareContext(ctx, pq.CopyIn("copied", "a"))
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]any{{1}, {2}, {}} { // the last, without values, ends the copy
		if _, err := st.ExecContext(ctx, args...); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM copied`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("copied %d rows, %v; want 2", n, err)
	}
}
