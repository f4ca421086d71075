package pgtest

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
)

func TestMain(m *testing.M) { os.Exit(Run(m)) }

func TestDatabasesAreIndependent(t *testing.T) {
	t0 := time.Now()
	first := Open(t)
	t.Logf("first database usable after %v", time.Since(t0))
	t0 = time.Now()
	second := Open(t)
	t.Logf("second database usable after %v", time.Since(t0))

	if _, err := first.ExecContext(t.Context(), "create table only_here (x int)"); err != nil {
		t.Fatal(err)
	}
	var names [2]string
	var tables [2]int
	for i, db := range []*sqlx.DB{first, second} {
		if err := db.GetContext(t.Context(), &names[i], "select current_database()"); err != nil {
			t.Fatal(err)
		}
		if err := db.GetContext(t.Context(), &tables[i], "select count(*) from pg_tables where tablename = 'only_here'"); err != nil {
			t.Fatal(err)
		}
	}
	if names[0] == names[1] {
		t.Errorf("both got database %s", names[0])
	}
	if tables != [2]int{1, 0} {
		t.Errorf("table only_here found %v times, want [1 0]", tables)
	}
}

func TestDBName(t *testing.T) {
	cases := []struct {
		seq  int64
		test string
		want string
	}{
		{1, "TestX", "t1_testx"},
		{12, "TestX/sub case-é", "t12_testx_sub_case___"},
		{3, strings.Repeat("a", 100), "t3_" + strings.Repeat("a", 60)},
	}
	for _, c := range cases {
		if got := dbName(c.seq, c.test); got != c.want {
			t.Errorf("dbName(%d, %q) = %q, want %q", c.seq, c.test, got, c.want)
		}
	}
}

func TestParallelDatabases(t *testing.T) {
	for i := range 4 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			db := Open(t)
			if _, err := db.ExecContext(t.Context(), "create table mine (x int)"); err != nil {
				t.Fatal(err)
			}
		})
	}
}
