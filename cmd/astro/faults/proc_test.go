//go:build faults

package faults

// The process harness of the fault suite: the service, NATS and PostgreSQL
// each run as their own OS process, so that each can be killed with SIGKILL
// and started again on the same data and the same address.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"astro/projections/pgserver"
)

// binaries are the service and nats-server binaries the suite runs.
type binaries struct {
	astro, nats string
}

// buildBinaries builds the service (cmd/astro) and nats-server, from the
// module go.mod already requires, into dir.
func buildBinaries(t *testing.T, dir string) binaries {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bins := binaries{astro: filepath.Join(dir, "astro"), nats: filepath.Join(dir, "nats-server")}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, b := range []struct{ out, pkg string }{{bins.astro, "astro/cmd/astro"}, {bins.nats, "github.com/nats-io/nats-server/v2"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(goBin, "build", "-o", b.out, b.pkg)
			if out, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("faults: go build -o %s %s: %v\n%s", b.out, b.pkg, err, out)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return bins
}

// freePort asks the kernel for a port nobody listens on. The suite keeps it
// for the whole scenario so that restarts come back on the same address.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("faults: pick a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// proc is a child process that can be started again after it stopped,
// with its output appended to one log file across starts.
type proc struct {
	name    string
	path    string
	args    []string
	env     []string
	logPath string

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	waitErr  error
	expected bool     // the current stop was asked for (kill or term)
	crashes  []string // exits nobody asked for
}

// start launches the process. It is started from a goroutine locked to its
// OS thread for the life of the child, so that the parent-death signal
// (which follows the forking thread) only fires when the test binary dies.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !isClosed(p.exited) {
		return fmt.Errorf("%s is already running", p.name)
	}
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "\n===== faults: %s started at %s =====\n", p.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	exited := make(chan struct{})
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the child's wait
		if err := cmd.Start(); err != nil {
			f.Close()
			started <- err
			return
		}
		started <- nil
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.waitErr = err
		if !p.expected {
			p.crashes = append(p.crashes, fmt.Sprintf("%s exited on its own at %s: %v", p.name, time.Now().Format("15:04:05.000"), err))
		}
		p.mu.Unlock()
		close(exited)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.cmd, p.exited, p.expected = cmd, exited, false
	return nil
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// running reports whether the process is alive.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !isClosed(p.exited)
}

// signal sends sig and waits up to timeout for the exit; past it, SIGKILL.
func (p *proc) signal(sig syscall.Signal, timeout time.Duration) error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	if cmd == nil || isClosed(exited) {
		p.mu.Unlock()
		return nil
	}
	p.expected = true
	p.mu.Unlock()
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s: %w", p.name, err)
	}
	select {
	case <-exited:
		return nil
	case <-time.After(timeout):
	}
	_ = cmd.Process.Kill()
	<-exited
	return fmt.Errorf("%s did not exit within %v of %v; killed", p.name, timeout, sig)
}

// kill is kill -9, and waits for the exit.
func (p *proc) kill() { _ = p.signal(syscall.SIGKILL, time.Minute) }

// term asks for a graceful stop.
func (p *proc) term(timeout time.Duration) error { return p.signal(syscall.SIGTERM, timeout) }

// exitErr is how the last run ended (nil: status 0).
func (p *proc) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

// unexpectedExits lists the exits nobody asked for.
func (p *proc) unexpectedExits() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.crashes...)
}

// logTail returns the last n lines of the process's output.
func (p *proc) logTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// childEnv is this process's environment without ASTRO_* settings, plus
// extra: a developer's own settings must not leak into the suite.
func childEnv(extra map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ASTRO_") {
			env = append(env, kv)
		}
	}
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

// natsNode is one nats-server process with JetStream.
type natsNode struct {
	proc
	port, routePort int
}

func (n *natsNode) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// startNATS starts count JetStream servers: one standalone server, or a
// cluster on loopback when count > 1. It waits until JetStream answers on
// every node.
func startNATS(t *testing.T, bin, dir string, count int) []*natsNode {
	t.Helper()
	nodes := make([]*natsNode, count)
	for i := range nodes {
		nodes[i] = &natsNode{port: freePort(t)}
		if count > 1 {
			nodes[i].routePort = freePort(t)
		}
	}
	for i, n := range nodes {
		name := fmt.Sprintf("n%d", i+1)
		store := filepath.Join(dir, "nats-"+name)
		if err := os.MkdirAll(store, 0o755); err != nil {
			t.Fatal(err)
		}
		args := []string{"-a", "127.0.0.1", "-p", fmt.Sprint(n.port), "-js", "-sd", store, "-n", name}
		if count > 1 {
			var routes []string
			for j, o := range nodes {
				if j != i {
					routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", o.routePort))
				}
			}
			args = append(args, "--cluster_name", "astro-faults", "--cluster", fmt.Sprintf("nats://127.0.0.1:%d", n.routePort),
				"--routes", strings.Join(routes, ","))
		}
		n.proc = proc{name: "nats-" + name, path: bin, args: args, env: childEnv(nil), logPath: filepath.Join(dir, "nats-"+name+".log")}
		if err := n.start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.kill)
	}
	for _, n := range nodes {
		if err := n.waitJetStream(60 * time.Second); err != nil {
			t.Fatalf("faults: %v\n%s", err, n.logTail(30))
		}
	}
	return nodes
}

// waitJetStream waits until the node accepts clients and JetStream answers
// (in a cluster: once a meta leader is elected).
func (n *natsNode) waitJetStream(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if !n.running() {
			return fmt.Errorf("%s exited while starting", n.name)
		}
		nc, err := nats.Connect(n.url(), nats.Timeout(time.Second), nats.NoReconnect())
		if err == nil {
			js, _ := jetstream.New(nc)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err = js.AccountInfo(ctx)
			cancel()
			nc.Close()
			if err == nil {
				return nil
			}
		}
		last = err
		time.Sleep(50 * time.Millisecond) // polling a starting server, bounded by the deadline
	}
	return fmt.Errorf("%s: JetStream not ready within %v: %v", n.name, timeout, last)
}

func natsURLs(nodes []*natsNode) string {
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		urls[i] = n.url()
	}
	return strings.Join(urls, ",")
}

// pgProc is the suite's PostgreSQL, a child process on a fixed port so
// that its URL survives a restart.
type pgProc struct {
	mu  sync.Mutex
	cfg pgserver.Config
	srv *pgserver.Server
	url string // of the "postgres" database
}

func startPG(t *testing.T) *pgProc {
	t.Helper()
	// The server runs as the postgres user when we are root: it must be
	// able to reach its directory, which t.TempDir (0700) does not allow.
	root, err := os.MkdirTemp("", "astro-faults-pg-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	p := &pgProc{cfg: pgserver.Config{DataDir: filepath.Join(root, "data"), Port: freePort(t), NoSync: true}}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p.stop(ctx)
		os.RemoveAll(root)
	})
	if err := p.start(context.Background()); err != nil {
		t.Fatalf("faults: PostgreSQL: %v", err)
	}
	return p
}

func (p *pgProc) start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	srv, err := pgserver.Start(ctx, p.cfg)
	if err != nil {
		return err
	}
	p.srv, p.url = srv, srv.URL()
	return nil
}

func (p *pgProc) stop(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv == nil {
		return nil
	}
	err := p.srv.Stop(ctx)
	p.srv = nil
	return err
}

// dbURL is the URL of database name on the server.
func (p *pgProc) dbURL(name string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Replace(p.url, "/postgres?", "/"+name+"?", 1)
}

// createDB creates an empty database.
func (p *pgProc) createDB(t *testing.T, name string) string {
	t.Helper()
	db, err := sqlx.Open("postgres", p.dbURL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE DATABASE ` + name); err != nil {
		t.Fatalf("faults: create database %s: %v", name, err)
	}
	return p.dbURL(name)
}

// astroProc is the service as its own process, on a fixed HTTP address.
type astroProc struct {
	proc
	addr    string
	base    string
	dataDir string
}

func newAstro(bin, dir string, port int, env map[string]string) *astroProc {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	dataDir := filepath.Join(dir, "astro-data")
	full := map[string]string{
		"ASTRO_HTTP_ADDR":  addr,
		"ASTRO_DATA_DIR":   dataDir,
		"ASTRO_JWT_SECRET": secret,
		"ASTRO_LOG_LEVEL":  "warn",
	}
	for k, v := range env {
		full[k] = v
	}
	return &astroProc{
		proc: proc{name: "astro", path: bin, env: childEnv(full), logPath: filepath.Join(dir, "astro.log")},
		addr: addr, base: "http://" + addr, dataDir: dataDir,
	}
}

var probeHTTP = &http.Client{Timeout: 2 * time.Second}

// ready reports whether /readyz answers 200.
func (a *astroProc) ready() bool {
	resp, err := probeHTTP.Get(a.base + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// waitReady waits until /readyz answers 200, failing early when the
// process exits.
func (a *astroProc) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if !a.running() {
			return fmt.Errorf("astro exited before it was ready")
		}
		if a.ready() {
			return nil
		}
		time.Sleep(25 * time.Millisecond) // polling a readiness probe, bounded by the deadline
	}
	return fmt.Errorf("astro not ready within %v", timeout)
}

// startReady starts s, killed when the test ends, and waits until it is
// ready.
func startReady(t *testing.T, s *astroProc) {
	t.Helper()
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.kill)
	if err := s.waitReady(90 * time.Second); err != nil {
		t.Fatalf("%v; service log ends:\n%s", err, s.logTail(40))
	}
}
