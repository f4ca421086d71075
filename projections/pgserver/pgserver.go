// Package pgserver owns Astro's private PostgreSQL: it finds the PostgreSQL
// binaries, initialises a cluster on first use, runs the postmaster as a child
// process of the program and stops it again.
//
// The server listens on 127.0.0.1 only, with unix sockets disabled, and takes
// only the superuser role "astro" with its password, which is kept in the
// cluster directory (astro.password, 0600) and is in URL. It is meant for a
// developer's machine, tests and CI; production points Astro at a real
// database with ASTRO_DATABASE_URL instead.
//
// # Running as root
//
// PostgreSQL refuses to run as root. When the effective uid is 0 the cluster is
// owned by, and initdb and postgres run as, the "postgres" OS user, or "nobody"
// when there is no such user. That user must be able to traverse every parent
// directory of DataDir. When it cannot (DataDir under /root, or inside a 0700
// directory such as the one t.TempDir makes), pgserver does not loosen the
// permissions of the caller's directories. It keeps the cluster in
// /var/lib/astro/pg-<random id> instead, logs that once per start, and writes
// the path to DataDir/astro-pgdata so that later starts find the same cluster.
// A DataDir deleted and made again gets a new cluster; the old one stays in
// /var/lib/astro until removed by hand.
//
// # Crashes
//
// postgres is started with a parent-death signal (SIGINT, a fast shutdown), so
// it does not outlive a program killed with SIGKILL. If a postmaster.pid is
// found on Start anyway, a postmaster for this cluster that is alive and
// answering is reused (it still stops when the program that started it
// exits, or on Stop); a dead one is left to postgres, which discards its
// stale pid file and recovers from the WAL. A pid file whose PID now belongs
// to another process is removed, as postgres would refuse to start over it.
//
// initdb gets the same parent-death signal, and makes a new cluster in a
// work directory beside the cluster directory (".<name>.initdb", under the
// lock ".<name>.initdb.lock"); the cluster is renamed into place, with its
// password, only when complete. A start killed halfway leaves no cluster,
// and the next start removes its work directory.
//
// The server's output goes to log/postgres.log in the cluster directory; a
// failed start returns its tail.
package pgserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"astro/projections/pgconn"
)

// Config says where the cluster lives and how to run it.
type Config struct {
	// DataDir is the cluster directory; it is created and initdb'd when
	// missing or empty.
	DataDir string
	// BinDir holds initdb and postgres. Empty means: the directory of initdb
	// on PATH, else the highest /usr/lib/postgresql/*/bin.
	BinDir string
	// Port is the TCP port on 127.0.0.1; 0 picks a free one at each start.
	Port int
	// NoSync trades crash safety of the machine (not of the process) for
	// speed: initdb --no-sync, fsync=off, full_page_writes=off. Tests only.
	NoSync bool
	// Logger receives lifecycle messages; nil discards them.
	Logger *slog.Logger
}

// ErrNoBinaries is returned, wrapped, when initdb and postgres are not found.
var ErrNoBinaries = errors.New("PostgreSQL binaries (initdb, postgres) not found: install PostgreSQL, or set ASTRO_DATABASE_URL to use an existing database instead")

// startTimeout bounds the wait for a server to accept connections.
const startTimeout = 30 * time.Second

// errShmemInUse marks a start that failed because processes of a killed
// postmaster still hold its shared memory.
var errShmemInUse = errors.New("shared memory of a previous postmaster still in use")

// Server is a running PostgreSQL, either started by us or found running.
type Server struct {
	url    string
	pid    int
	dir    string
	logger *slog.Logger
	// exited is closed when our child exits; nil for a reused server, which
	// is not our child and has to be polled instead.
	exited chan struct{}

	mu      sync.Mutex
	stopped bool
}

// Start makes sure the cluster in cfg.DataDir exists and a postgres serves
// it, and returns once that server accepts connections.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.DataDir == "" {
		return nil, errors.New("pgserver: Config.DataDir is empty")
	}
	bin, err := FindBinDir(cfg.BinDir)
	if err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := clusterDir(cfg.DataDir, cred, logger)
	if err != nil {
		return nil, err
	}
	if err := ensureCluster(ctx, bin, dir, cred, cfg.NoSync, logger); err != nil {
		return nil, err
	}

	pw, err := password(dir)
	if err != nil {
		return nil, err
	}

	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if s, err := reuse(ctx, dir, pw, logger); s != nil || err != nil {
		if err == nil {
			err = s.secure(ctx, pw, cred)
		}
		return s, err
	}
	for {
		s, err := launch(ctx, bin, dir, pw, cred, cfg, logger)
		if err == nil {
			if err = s.secure(ctx, pw, cred); err != nil {
				stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = s.Stop(stopCtx)
			}
			return s, err
		}
		if !errors.Is(err, errShmemInUse) {
			return s, err
		}
		// Backends orphaned by a killed postmaster exit as soon as they
		// notice it is gone; give them a moment.
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// URL is a lib/pq connection URL for the superuser "astro", with its
// password, and database "postgres".
func (s *Server) URL() string { return s.url }

// Stop asks postgres for a fast shutdown (open transactions are rolled back)
// and waits for it to exit. Stopping a stopped server is a no-op. If ctx ends
// first, postgres gets an immediate shutdown and Stop returns the error.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || !s.running() {
		s.stopped = true
		return nil
	}
	if err := syscall.Kill(s.pid, syscall.SIGINT); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("pgserver: signal postgres (pid %d): %w", s.pid, err)
	}
	if err := s.wait(ctx); err != nil {
		// Immediate shutdown, so that postgres does not outlive us; the next
		// start recovers from the WAL.
		_ = syscall.Kill(s.pid, syscall.SIGQUIT)
		return fmt.Errorf("pgserver: stop postgres (pid %d): %w", s.pid, err)
	}
	s.stopped = true
	s.logger.Info("postgres stopped", "pid", s.pid)
	return nil
}

// running reports whether the postmaster is still there. For our own child
// the exited channel is authoritative: its PID may already be reused.
func (s *Server) running() bool {
	if s.exited == nil {
		return isPostmaster(s.pid, s.dir)
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

func (s *Server) wait(ctx context.Context) error {
	if s.exited != nil {
		select {
		case <-s.exited:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for s.running() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// reuse returns a Server for a postmaster already serving dir, or nil when
// there is none and one has to be started.
func reuse(ctx context.Context, dir, pw string, logger *slog.Logger) (*Server, error) {
	pidFile := filepath.Join(dir, "postmaster.pid")
	pid, port, err := readPIDFile(pidFile)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, nil
	case err == nil && isPostmaster(pid, dir):
		// Running, or still starting: wait for it below.
	case err == nil && errors.Is(syscall.Kill(pid, 0), syscall.ESRCH):
		// postgres itself discards a pid file whose process is gone.
		return nil, nil
	default:
		// But postgres refuses to start over a pid file whose PID now
		// belongs to another process (PIDs are small and soon reused in
		// containers), or over a garbled one.
		logger.Info("removing stale postmaster.pid", "pid", pid, "err", err)
		if err := os.Remove(pidFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("pgserver: remove stale pid file: %w", err)
		}
		return nil, nil
	}
	s := &Server{url: serverURL(port, pw), pid: pid, dir: dir, logger: logger}
	err = waitReady(ctx, s.url, func() bool { return !s.running() })
	if errors.Is(err, errExited) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pgserver: postgres (pid %d) is running on %s but does not accept connections: %w", pid, dir, err)
	}
	logger.Info("reusing running postgres", "pid", pid, "port", port, "dir", dir)
	return s, nil
}

// launch starts postgres on dir and waits until it accepts connections.
func launch(ctx context.Context, bin, dir, pw string, cred *syscall.Credential, cfg Config, logger *slog.Logger) (*Server, error) {
	port := cfg.Port
	if port == 0 {
		var err error
		if port, err = freePort(); err != nil {
			return nil, err
		}
	}
	logPath, logFile, offset, err := openLog(dir)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // postgres has its own descriptor once started

	args := []string{"-D", dir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", fmt.Sprintf("port=%d", port),
		"-c", "unix_socket_directories=",
	}
	if cfg.NoSync {
		// synchronous_commit stays on: a killed process then never loses a
		// committed transaction, and with fsync off a commit costs a write().
		args = append(args, "-c", "fsync=off", "-c", "full_page_writes=off")
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"), args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group: a Ctrl-C in the terminal goes to Astro alone,
	// which stops the server after its grace period, rather than to the
	// server too, which would end every session at once. Pdeathsig still
	// stops it if Astro dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGINT, Setpgid: true}

	s := &Server{url: serverURL(port, pw), dir: dir, logger: logger, exited: make(chan struct{})}
	if err := s.spawn(cmd); err != nil {
		return nil, fmt.Errorf("pgserver: start postgres: %w", err)
	}
	gone := func() bool { return !s.running() }
	if err := waitReady(ctx, s.url, gone); err != nil {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(stopCtx)
		tail := logTail(logPath, offset)
		if errors.Is(err, errExited) && strings.Contains(tail, "pre-existing shared memory block") {
			err = errShmemInUse
		}
		return nil, fmt.Errorf("pgserver: postgres on %s did not start: %w; server log %s ends:\n%s", dir, err, logPath, tail)
	}
	logger.Info("postgres started", "pid", s.pid, "port", port, "dir", dir)
	return s, nil
}

// spawn starts cmd from a goroutine locked to its OS thread until the child
// exits. Pdeathsig fires when the thread that forked exits, not the process;
// a locked thread only ends with its goroutine, which outlives the child.
func (s *Server) spawn(cmd *exec.Cmd) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		s.pid = cmd.Process.Pid
		started <- nil
		err := cmd.Wait()
		s.logger.Info("postgres exited", "pid", cmd.Process.Pid, "status", err)
		close(s.exited)
	}()
	return <-started
}

var errExited = errors.New("postgres exited")

// waitReady polls until a connection to url succeeds, gone reports the
// server gone, or ctx ends. A TCP connect alone is not enough: postgres
// accepts those while it is still recovering.
func waitReady(ctx context.Context, url string, gone func() bool) error {
	connector, err := pgconn.NewConnector(url)
	if err != nil {
		return fmt.Errorf("pgserver: parse url: %w", err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		pingCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := db.PingContext(pingCtx)
		cancel()
		if err == nil {
			return nil
		}
		if gone() {
			return errExited
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last attempt: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

func serverURL(port int, pw string) string {
	return fmt.Sprintf("postgres://astro:%s@127.0.0.1:%d/postgres?sslmode=disable", pw, port)
}

// freePort asks the kernel for an unused port. Another process could take it
// before postgres binds it; the window is small enough for a dev box.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgserver: pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// maxLogSize is where the server log starts over, so that a long-lived data
// directory does not collect an unbounded log.
const maxLogSize = 16 << 20

// openLog opens dir/log/postgres.log for appending and returns the offset at
// which this start's output begins.
func openLog(dir string) (string, *os.File, int64, error) {
	path := filepath.Join(dir, "log", "postgres.log")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", nil, 0, fmt.Errorf("pgserver: create log dir: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return "", nil, 0, fmt.Errorf("pgserver: open server log: %w", err)
	}
	offset, err := f.Seek(0, io.SeekEnd)
	if err == nil && offset > maxLogSize {
		err = f.Truncate(0)
		offset = 0
	}
	if err != nil {
		f.Close()
		return "", nil, 0, fmt.Errorf("pgserver: server log: %w", err)
	}
	return path, f, offset, nil
}

// logTail returns the last lines written to the log at or after offset.
func logTail(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	defer f.Close()
	if size, err := f.Seek(0, io.SeekEnd); err == nil && size-offset > 64<<10 {
		offset = size - 64<<10
	}
	b, err := io.ReadAll(io.NewSectionReader(f, offset, 64<<10))
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}
