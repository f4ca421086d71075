package pgserver

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lib/pq"
)

// newDataDir returns a data dir path inside a fresh 0755 directory. Not
// t.TempDir: that is 0700, which the postgres user cannot traverse when the
// tests run as root (TestFallbackDir covers that case).
func newDataDir(t *testing.T) string {
	t.Helper()
	root, err := os.MkdirTemp("", "pgserver-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "data")
}

func start(t *testing.T, dataDir string) *Server {
	t.Helper()
	s, err := Start(t.Context(), Config{
		DataDir: dataDir,
		NoSync:  true,
		Logger:  slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return s
}

func open(t *testing.T, s *Server) *sql.DB {
	t.Helper()
	c, err := pq.NewConnector(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { db.Close() })
	return db
}

func mustExec(t *testing.T, s *Server, query string) {
	t.Helper()
	if _, err := open(t, s).ExecContext(t.Context(), query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func count(t *testing.T, s *Server) int {
	t.Helper()
	var n int
	if err := open(t, s).QueryRowContext(t.Context(), "select count(*) from kept").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRestartKeepsData(t *testing.T) {
	t.Parallel()
	dir := newDataDir(t)
	s := start(t, dir)
	if !strings.HasPrefix(s.URL(), "postgres://astro:") || !strings.Contains(s.URL(), "@127.0.0.1:") {
		t.Errorf("URL() = %q", s.URL())
	}
	mustExec(t, s, "select 1")
	mustExec(t, s, "create table kept (x int); insert into kept values (1), (2)")
	for range 2 { // Stop is idempotent
		if err := s.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if got := count(t, start(t, dir)); got != 2 {
		t.Errorf("after restart: %d rows, want 2", got)
	}
}

// The server listens on loopback, where every local user and process can
// reach it: only the role astro with its password gets in, also on a
// cluster an older Astro left trusting every local connection.
func TestOnlyAstroWithItsPasswordGetsIn(t *testing.T) {
	t.Parallel()
	dir := newDataDir(t)
	s := start(t, dir)
	onlyWithThePassword(t, s)

	if err := s.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	trust := "host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n"
	if err := os.WriteFile(filepath.Join(s.dir, "pg_hba.conf"), []byte(trust), 0o600); err != nil {
		t.Fatal(err)
	}
	onlyWithThePassword(t, start(t, dir))
}

// A new cluster asks for the password from its first start, before secure
// writes Astro's pg_hba.conf: trusting local connections until then would
// let any local user in as superuser meanwhile.
func TestNewClusterAsksForThePasswordFromTheStart(t *testing.T) {
	t.Parallel()
	dir := newDataDir(t)
	bin, err := FindBinDir("")
	if err != nil {
		t.Fatal(err)
	}
	cred, err := runAs()
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(t.Output(), nil))
	if err := ensureCluster(t.Context(), bin, dir, cred, true, logger); err != nil {
		t.Fatal(err)
	}
	pw, err := password(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := launch(t.Context(), bin, dir, pw, cred, Config{DataDir: dir, NoSync: true}, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	onlyWithThePassword(t, s)
	if _, err := os.Lstat(filepath.Join(filepath.Dir(dir), ".data.initdb")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("initdb's work dir, with its copy of the password, left: %v", err)
	}
}

// onlyWithThePassword checks that s lets astro in with its password, and
// nobody without it.
func onlyWithThePassword(t *testing.T, s *Server) {
	t.Helper()
	mustExec(t, s, "select 1")
	u, err := url.Parse(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	for what, user := range map[string]*url.Userinfo{
		"astro without a password":    url.User("astro"),
		"astro with another password": url.UserPassword("astro", "guess"),
		"postgres without a password": url.User("postgres"),
	} {
		other := *u
		other.User = user
		db, err := sql.Open("postgres", other.String())
		if err != nil {
			t.Fatal(err)
		}
		if err := db.PingContext(t.Context()); err == nil {
			t.Errorf("%s got in", what)
		}
		db.Close()
	}
}

func TestStalePIDFile(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		crash func(t *testing.T, s *Server, dir string)
	}{
		{"postmaster killed", func(t *testing.T, s *Server, _ string) {
			if err := syscall.Kill(s.pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			select {
			case <-s.exited:
			case <-time.After(10 * time.Second):
				t.Fatal("postgres still running after SIGKILL")
			}
		}},
		{"pid reused by another process", func(t *testing.T, s *Server, dir string) {
			// PID 1 is alive but not postgres.
			stopAndFakePIDFile(t, s, dir, 1)
		}},
		{"pid reused by another postgres", func(t *testing.T, s *Server, dir string) {
			other := start(t, newDataDir(t))
			stopAndFakePIDFile(t, s, dir, other.pid)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := newDataDir(t)
			s := start(t, dir)
			mustExec(t, s, "create table kept (x int); insert into kept values (1)")
			c.crash(t, s, dir)
			if got := count(t, start(t, dir)); got != 1 {
				t.Errorf("after restart: %d rows, want 1", got)
			}
		})
	}
}

// stopAndFakePIDFile stops s and leaves a postmaster.pid naming pid, which
// postgres alone would refuse to start over.
func stopAndFakePIDFile(t *testing.T, s *Server, dir string, pid int) {
	t.Helper()
	if err := s.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	content := fmt.Sprintf("%d\n%s\n0\n5432\n\n127.0.0.1\n0 0\nready\n", pid, dir)
	if err := os.WriteFile(filepath.Join(dir, "postmaster.pid"), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestCancelledInitdbLeavesNoCluster(t *testing.T) {
	t.Parallel()
	dir := newDataDir(t)
	// initdb takes longer than this; it is cancelled halfway.
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if s, err := Start(ctx, Config{DataDir: dir, NoSync: true}); err == nil {
		s.Stop(t.Context())
		t.Fatal("Start succeeded despite the cancelled context")
	}
	mustExec(t, start(t, dir), "select 1")
}

// childBinEnv makes the test binary act as the program that
// TestKilledInitdb kills: it starts a server on the data dir named by
// childDirEnv with the initdb in the named bin dir.
const childBinEnv = "PGSERVER_TEST_CHILD_BIN"

// A start killed with its initdb (a power loss, or a kill of the process
// group) leaves a half-made cluster with PG_VERSION, which the next start
// must not take for a real one. And initdb does not outlive its killed
// parent, as postgres does not: it would write on under the next start.
func TestKilledInitdb(t *testing.T) {
	if bin := os.Getenv(childBinEnv); bin != "" {
		_, err := Start(context.Background(), Config{DataDir: os.Getenv(childDirEnv), BinDir: bin, NoSync: true})
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	t.Parallel()
	dir := newDataDir(t)
	real, err := FindBinDir("")
	if err != nil {
		t.Fatal(err)
	}
	// This initdb begins the cluster as the real one does, with PG_VERSION,
	// says so in initdb.pid, and then works on until it is stopped.
	bin := filepath.Join(filepath.Dir(dir), "bin")
	pidFile := filepath.Join(bin, "initdb.pid")
	script := fmt.Sprintf("#!/bin/sh\nmkdir -p \"$2\" && echo 15 >\"$2/PG_VERSION\" && echo $$ >%[1]s.new && mv %[1]s.new %[1]s && exec sleep 30\n", pidFile)
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(bin, 0o777); err != nil { // initdb may run as the server user
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "initdb"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(real, "postgres"), filepath.Join(bin, "postgres")); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledInitdb$")
	cmd.Env = append(os.Environ(), childDirEnv+"="+dir, childBinEnv+"="+bin)
	cmd.Stdout, cmd.Stderr = t.Output(), t.Output()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var pid int
	waitFor(t, 10*time.Second, func() error {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return fmt.Errorf("initdb did not start: %w", err)
		}
		_, err = fmt.Sscan(string(b), &pid)
		return err
	})
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	waitFor(t, 10*time.Second, func() error {
		if alive(pid) {
			return fmt.Errorf("initdb (pid %d) outlived its killed parent", pid)
		}
		return nil
	})

	s := start(t, dir)
	mustExec(t, s, "create table kept (x int); insert into kept values (1)")
	if got := count(t, s); got != 1 {
		t.Errorf("%d rows, want 1", got)
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(dir), ".data.initdb")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the killed initdb's work dir is left: %v", err)
	}
}

// alive reports whether pid is a process that has not exited; an orphan
// may stay a zombie where nothing reaps it.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	end := strings.LastIndexByte(s, ')')
	return end < 0 || len(s) < end+3 || s[end+2] != 'Z' && s[end+2] != 'X'
}

func TestReuseRunning(t *testing.T) {
	t.Parallel()
	dir := newDataDir(t)
	first := start(t, dir)
	second := start(t, dir)
	if second.URL() != first.URL() || second.pid != first.pid {
		t.Fatalf("second start: %s (pid %d), want reuse of %s (pid %d)", second.URL(), second.pid, first.URL(), first.pid)
	}
	if err := second.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("stopping the reused server did not stop postgres")
	}
}

// childDirEnv makes the test binary act as the program that TestParentKilled
// kills: it starts a server on the named data dir and waits to be killed.
const childDirEnv = "PGSERVER_TEST_CHILD_DIR"

func TestParentKilled(t *testing.T) {
	if dir := os.Getenv(childDirEnv); dir != "" {
		s, err := Start(context.Background(), Config{DataDir: dir, NoSync: true})
		if err != nil {
			fmt.Println("ERROR", err)
			os.Exit(1)
		}
		fmt.Println("READY", s.pid, s.URL())
		io.Copy(io.Discard, os.Stdin) // the parent never closes it
		os.Exit(1)
	}
	t.Parallel()
	dir := newDataDir(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestParentKilled$")
	cmd.Env = append(os.Environ(), childDirEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var pid int
	var url string
	for sc := bufio.NewScanner(stdout); pid == 0 && sc.Scan(); {
		if _, err := fmt.Sscanf(sc.Text(), "READY %d %s", &pid, &url); err != nil && strings.HasPrefix(sc.Text(), "ERROR") {
			t.Fatal(sc.Text())
		}
	}
	if pid == 0 {
		t.Fatal("child exited without starting postgres")
	}
	mustExec(t, &Server{url: url}, "create table kept (x int); insert into kept values (1)")

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	waitFor(t, 10*time.Second, func() error {
		if isPostmaster(pid, dir) {
			return fmt.Errorf("postgres (pid %d) outlived its killed parent", pid)
		}
		return nil
	})
	if got := count(t, start(t, dir)); got != 1 {
		t.Errorf("after restart: %d rows, want 1", got)
	}
}

func TestFallbackDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the fallback only applies when running as root")
	}
	t.Parallel()
	dataDir := filepath.Join(t.TempDir(), "data") // 0700 parent: postgres cannot enter
	abs, _ := filepath.Abs(dataDir)
	cred, err := runAs()
	if err != nil {
		t.Fatal(err)
	}
	want, err := clusterDir(abs, cred, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(want) })
	if !strings.HasPrefix(want, fallbackRoot+"/pg-") {
		t.Fatalf("cluster dir %s, want one under %s", want, fallbackRoot)
	}

	s := start(t, dataDir)
	mustExec(t, s, "create table kept (x int); insert into kept values (1)")
	if err := s.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(want, "PG_VERSION")); err != nil {
		t.Errorf("no cluster in fallback dir: %v", err)
	}
	if got := count(t, start(t, dataDir)); got != 1 {
		t.Errorf("after restart: %d rows, want 1", got)
	}
}

// A data dir deleted and made again, the usual reset, gets a new
// fallback cluster: the old one's checkpoints are of the deleted log.
func TestFallbackDirOfAResetDataDirIsNew(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the fallback only applies when running as root")
	}
	t.Parallel()
	dataDir := filepath.Join(t.TempDir(), "data") // 0700 parent: postgres cannot enter
	cred, err := runAs()
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for range 2 {
		dir, err := clusterDir(dataDir, cred, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		dirs = append(dirs, dir)
		s := start(t, dataDir)
		mustExec(t, s, "create table kept (x int)") // fails on the old cluster, which has it
		if err := s.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(dataDir); err != nil {
			t.Fatal(err)
		}
	}
	if dirs[0] == dirs[1] {
		t.Errorf("the reset data dir's cluster is the old one, %s", dirs[0])
	}
}

// A data dir an older Astro made keeps its cluster, named in the pointer
// by the hash of the data dir's path.
func TestFallbackDirOfAnOlderDataDirIsKept(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the fallback only applies when running as root")
	}
	t.Parallel()
	dataDir := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(fallbackRoot, "pg-0123456789ab")
	if err := os.WriteFile(filepath.Join(dataDir, pointerFile), []byte(old+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cred, err := runAs()
	if err != nil {
		t.Fatal(err)
	}
	if dir, err := clusterDir(dataDir, cred, slog.New(slog.DiscardHandler)); err != nil || dir != old {
		t.Errorf("cluster dir %s, %v; want the pointer's %s", dir, err, old)
	}
}

func TestNoBinaries(t *testing.T) {
	t.Parallel()
	onlyInitdb := t.TempDir()
	if err := os.WriteFile(filepath.Join(onlyInitdb, "initdb"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, binDir := range map[string]string{"empty": t.TempDir(), "initdb only": onlyInitdb} {
		t.Run(name, func(t *testing.T) {
			_, err := Start(t.Context(), Config{DataDir: t.TempDir(), BinDir: binDir})
			if !errors.Is(err, ErrNoBinaries) {
				t.Fatalf("err = %v, want ErrNoBinaries", err)
			}
			if !strings.Contains(err.Error(), "ASTRO_DATABASE_URL") {
				t.Errorf("error does not say how to use another database: %v", err)
			}
		})
	}
}

// waitFor polls cond until it returns nil, and fails the test with cond's
// last error once timeout has passed.
func waitFor(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond) // polling, bounded by the deadline
	}
}
