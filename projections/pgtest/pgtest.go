// Package pgtest owns the PostgreSQL that tests use: one private server per
// test binary, started on first use, handing each test a fresh, empty
// database of its own.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }
//
// and call URL or Open in tests. Without Run the server still stops when the
// test binary exits (pgserver's parent-death signal), but its files stay in
// the temp directory.
//
// initdb is the slow part of a start (seconds), so it runs once per machine
// and PostgreSQL version: the result is kept in
// os.TempDir()/astro-pgtest-template-<version>, built under a file lock so
// that test binaries running in parallel do not race, and copied into each
// test binary's own data directory. Each binary then runs its own server on
// its own free port, with durability traded for speed (pgserver.Config.NoSync).
//
// A missing PostgreSQL fails the test with pgserver's error; it never skips.
package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"astro/projections/pgconn"
	"astro/projections/pgserver"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// shared is the test binary's one server. A package variable is the point
// here: tests in a package share the server without passing a handle around.
var shared struct {
	once sync.Once
	h    *harness
	err  error
}

type harness struct {
	root  string // temp dir holding this binary's cluster
	srv   *pgserver.Server
	admin *sql.DB
	seq   atomic.Int64
}

// Run runs the tests, then stops the shared server, if one was started, and
// removes its files. It returns the exit code for os.Exit.
func Run(m *testing.M) int {
	code := m.Run()
	// m.Run has waited for every test, so shared is no longer written.
	if h := shared.h; h != nil {
		if err := h.close(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// URL returns the URL of a new, empty database on the shared server, which is
// started on first use. The database is dropped when the test ends.
func URL(t testing.TB) string {
	t.Helper()
	shared.once.Do(func() { shared.h, shared.err = start() })
	if shared.err != nil {
		t.Fatalf("pgtest: %v", shared.err)
	}
	h := shared.h

	name := dbName(h.seq.Add(1), t.Name())
	if _, err := h.admin.ExecContext(t.Context(), "CREATE DATABASE "+pq.QuoteIdentifier(name)); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		// t.Context is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := h.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+pq.QuoteIdentifier(name)+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})

	u, err := url.Parse(h.srv.URL())
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// Open connects to a new, empty database (see URL) as Astro does (pgconn),
// checks the connection, and closes it when the test ends.
func Open(t testing.TB) *sqlx.DB {
	t.Helper()
	db, err := pgconn.Open(URL(t))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.PingContext(t.Context()); err != nil {
		t.Fatalf("pgtest: ping: %v", err)
	}
	return db
}

// dbName makes a unique database name that still says which test owns it,
// within PostgreSQL's 63-byte limit.
func dbName(seq int64, testName string) string {
	name := []byte(fmt.Sprintf("t%d_%s", seq, strings.ToLower(testName)))
	for i, c := range name {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			name[i] = '_'
		}
	}
	return string(name[:min(len(name), 63)])
}

func start() (*harness, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin, err := pgserver.FindBinDir("")
	if err != nil {
		return nil, err
	}
	tmpl, err := template(ctx, bin)
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp("", "astro-pgtest-")
	if err != nil {
		return nil, err
	}
	h := &harness{root: root}
	if err := h.open(ctx, bin, tmpl); err != nil {
		return nil, errors.Join(err, h.close())
	}
	return h, nil
}

func (h *harness) open(ctx context.Context, bin, tmpl string) error {
	// As root, the server runs as another user, who must get through root.
	if err := os.Chmod(h.root, 0o755); err != nil {
		return err
	}
	// The copy belongs to us; pgserver hands it to the server user.
	data := filepath.Join(h.root, "data")
	if err := copyCluster(tmpl, data); err != nil {
		return fmt.Errorf("copy template cluster: %w", err)
	}
	var err error
	h.srv, err = pgserver.Start(ctx, pgserver.Config{DataDir: data, BinDir: bin, NoSync: true})
	if err != nil {
		return err
	}
	h.admin, err = sql.Open("postgres", h.srv.URL())
	if err != nil {
		return err
	}
	return h.admin.PingContext(ctx)
}

func (h *harness) close() error {
	var errs []error
	if h.admin != nil {
		errs = append(errs, h.admin.Close())
	}
	if h.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		errs = append(errs, h.srv.Stop(ctx))
	}
	errs = append(errs, os.RemoveAll(h.root))
	return errors.Join(errs...)
}

// template returns the machine's initdb'd cluster for the PostgreSQL in bin,
// creating it on first use.
func template(ctx context.Context, bin string) (string, error) {
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "postgres"), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("postgres --version: %w", err)
	}
	// "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)"
	fields := strings.Fields(string(out))
	if len(fields) < 3 {
		return "", fmt.Errorf("postgres --version: unexpected %q", out)
	}
	dir := filepath.Join(os.TempDir(), "astro-pgtest-template-"+fields[2])
	if _, err := os.Stat(dir); err == nil {
		return dir, nil // complete: it appears by rename only
	}

	lock, err := os.OpenFile(dir+".lock", os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return "", err
	}
	defer lock.Close() // closing releases the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	if _, err := os.Stat(dir); err == nil {
		return dir, nil // another test binary built it while we waited
	}

	// Build beside the final place and rename, so that a crash halfway
	// leaves no half-made template behind. Starting it once checks it works.
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return "", err
	}
	srv, err := pgserver.Start(ctx, pgserver.Config{DataDir: tmp, BinDir: bin, NoSync: true})
	if err != nil {
		return "", fmt.Errorf("build template cluster: %w", err)
	}
	if err := srv.Stop(ctx); err != nil {
		return "", fmt.Errorf("build template cluster: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	return dir, nil
}

// copyCluster copies a stopped cluster, keeping file modes, which postgres
// checks, and leaving out what belonged to the template's own run.
func copyCluster(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		switch rel {
		case "log", "postmaster.pid", "postmaster.opts":
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			if err := os.Mkdir(target, info.Mode().Perm()); err != nil {
				return err
			}
			return os.Chmod(target, info.Mode().Perm()) // undo the umask
		case info.Mode().IsRegular():
			return copyFile(path, target, info.Mode().Perm())
		default:
			return fmt.Errorf("%s: unexpected file type %s", path, info.Mode().Type())
		}
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, perm) // undo the umask
}
