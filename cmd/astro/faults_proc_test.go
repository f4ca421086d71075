//go:build faults

package main

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

// faultBinaries are the service and nats-server binaries the suite runs.
type faultBinaries struct {
	astro, nats string
}

// buildBinaries builds the service from this package and nats-server from
// the module go.mod already requires, into dir.
func buildFaultBinaries(t *testing.T, dir string) faultBinaries {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bins := faultBinaries{astro: filepath.Join(dir, "astro"), nats: filepath.Join(dir, "nats-server")}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, b := range []struct{ out, pkg string }{{bins.astro, "."}, {bins.nats, "github.com/nats-io/nats-server/v2"}} {
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
func faultFreePort(t testing.TB) int {
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
type faultProc struct {
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
func (p *faultProc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !faultIsClosed(p.exited) {
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

func faultIsClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// running reports whether the process is alive.
func (p *faultProc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !faultIsClosed(p.exited)
}

// signal sends sig and waits up to timeout for the exit; past it, SIGKILL.
func (p *faultProc) signal(sig syscall.Signal, timeout time.Duration) error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	if cmd == nil || faultIsClosed(exited) {
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
func (p *faultProc) kill() { _ = p.signal(syscall.SIGKILL, time.Minute) }

// term asks for a graceful stop.
func (p *faultProc) term(timeout time.Duration) error { return p.signal(syscall.SIGTERM, timeout) }

// exitErr is how the last run ended (nil: status 0).
func (p *faultProc) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

// unexpectedExits lists the exits nobody asked for.
func (p *faultProc) unexpectedExits() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.crashes...)
}

// logTail returns the last n lines of the process's output.
func (p *faultProc) logTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// childEnv is this process's environment without ASTRO_* settings, plus
// extra: a developer's own settings must not leak into the suite.
func faultChildEnv(extra map[string]string) []string {
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
type faultNATSNode struct {
	faultProc
	port, routePort int
}

func (n *faultNATSNode) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// startNATS starts count JetStream servers: one standalone server, or a
// cluster on loopback when count > 1. It waits until JetStream answers on
// every node.
func startFaultNATS(t *testing.T, bin, dir string, count int) []*faultNATSNode {
	t.Helper()
	nodes := make([]*faultNATSNode, count)
	for i := range nodes {
		nodes[i] = &faultNATSNode{port: faultFreePort(t)}
		if count > 1 {
			nodes[i].routePort = faultFreePort(t)
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
		n.faultProc = faultProc{name: "nats-" + name, path: bin, args: args, env: faultChildEnv(nil), logPath: filepath.Join(dir, "nats-"+name+".log")}
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
func (n *faultNATSNode) waitJetStream(timeout time.Duration) error {
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

func faultNATSURLs(nodes []*faultNATSNode) string {
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		urls[i] = n.url()
	}
	return strings.Join(urls, ",")
}

// pgProc is the suite's PostgreSQL, a child process on a fixed port so
// that its URL survives a restart.
type faultPG struct {
	mu  sync.Mutex
	cfg pgserver.Config
	srv *pgserver.Server
	url string // of the "postgres" database
}

func startFaultPG(t *testing.T) *faultPG {
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
	p := &faultPG{cfg: pgserver.Config{DataDir: filepath.Join(root, "data"), Port: faultFreePort(t), NoSync: true}}
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

func (p *faultPG) start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	srv, err := pgserver.Start(ctx, p.cfg)
	if err != nil {
		return err
	}
	p.srv, p.url = srv, srv.URL()
	return nil
}

func (p *faultPG) stop(ctx context.Context) error {
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
func (p *faultPG) dbURL(name string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Replace(p.url, "/postgres?", "/"+name+"?", 1)
}

// createDB creates an empty database.
func (p *faultPG) createDB(t *testing.T, name string) string {
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
type faultAstro struct {
	faultProc
	addr string
	base string
}

func newFaultAstro(bin, dir string, port int, env map[string]string) *faultAstro {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	full := map[string]string{
		"ASTRO_HTTP_ADDR":  addr,
		"ASTRO_DATA_DIR":   filepath.Join(dir, "astro-data"),
		"ASTRO_JWT_SECRET": testSecret,
		"ASTRO_LOG_LEVEL":  "warn",
	}
	for k, v := range env {
		full[k] = v
	}
	return &faultAstro{
		faultProc: faultProc{name: "astro", path: bin, env: faultChildEnv(full), logPath: filepath.Join(dir, "astro.log")},
		addr:      addr, base: "http://" + addr,
	}
}

var faultProbeHTTP = &http.Client{Timeout: 2 * time.Second}

// ready reports whether /readyz answers 200.
func (a *faultAstro) ready() bool {
	resp, err := faultProbeHTTP.Get(a.base + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// waitReady waits until /readyz answers 200, failing early when the
// process exits.
func (a *faultAstro) waitReady(timeout time.Duration) error {
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
