// Package natsserver owns Astro's embedded NATS server: a single JetStream
// server (no cluster) running inside the program, storing streams under
// StoreDir. The program talks to it over in-process connections; TCP clients
// are accepted only when Listen says so.
//
// With Passwords set, nobody connects without a user and password, not even
// in-process: Astro as UserAstro (every right), downstream consumers as
// UserConsumer and upstream services as UserService, each with the
// permissions of its role (see Permissions). Without them the server is
// open to anyone who can reach it, which only tests should want.
//
// A stream whose store failed a write (a full disk) refuses writes until
// the server restarts; Watch restarts it within the running program.
package natsserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"astro/events/rounds"
)

// Config says where JetStream keeps its data and whether TCP is open.
type Config struct {
	// StoreDir is the JetStream file store directory.
	StoreDir string
	// Listen is "host:port" to also accept TCP clients (port 0 picks a free
	// one), or "" or "off" for in-process connections only.
	Listen string
	// SyncAlways makes every append durable before its writer is
	// answered, so an answered event survives a power loss of this
	// machine; the writer calls Sync after each acknowledged append.
	// JetStream's own sync_always fsyncs each append in turn under its
	// block's lock, which caps a store at one append per fsync however
	// many writers wait; on Linux the store runs on its interval instead
	// (a single-replica stream still writes each append to the operating
	// system before acknowledging it) and Sync groups the fsyncs, as
	// PostgreSQL groups its commits. Off, the store syncs on an interval:
	// a process crash still loses nothing (the operating system has the
	// bytes), a power loss can lose the interval.
	SyncAlways bool
	// Passwords turns authentication on: one user per role with a
	// password. Empty, anyone may connect and do anything.
	Passwords Passwords
	// ProtectedConsumers names Astro's own durable consumers on the event
	// stream, which the consumer role may not touch.
	ProtectedConsumers []string
	// Logger receives the server's errors and warnings, and its notices at
	// debug level; nil discards them.
	Logger *slog.Logger
}

// Server is a running embedded NATS server.
type Server struct {
	mu   sync.RWMutex   // held for writing while the server restarts (heal.go)
	ns   *server.Server // the server running, under mu
	opts *server.Options
	log  *slog.Logger

	astro string                  // Astro's own password, "" without authentication
	store *os.File                // StoreDir, open for syncfs; nil unless Astro groups the fsyncs
	group *rounds.Group[struct{}] // the store's fsyncs; nil unless Astro groups them
}

// readyTimeout bounds the wait for the server when ctx has no earlier
// deadline.
const readyTimeout = 10 * time.Second

// Start starts the server and waits until it is ready for connections.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("natsserver: Config.StoreDir is empty")
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	opts := &server.Options{
		ServerName: "astro",
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		DontListen: true,
		NoSigs:     true, // signals belong to the program, not to a library
		SyncAlways: cfg.SyncAlways && !groupCommit,
	}
	if cfg.Passwords != (Passwords{}) {
		if cfg.Passwords.Astro == "" {
			return nil, errors.New("natsserver: with authentication on, Astro's own password is required")
		}
		opts.Users = users(cfg.Passwords, cfg.ProtectedConsumers)
	}
	if cfg.Listen != "" && cfg.Listen != "off" {
		host, portStr, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("natsserver: Listen %q: %w", cfg.Listen, err)
		}
		port, err := strconv.Atoi(portStr)
		if err != nil {
			return nil, fmt.Errorf("natsserver: Listen %q: bad port: %w", cfg.Listen, err)
		}
		if port == 0 {
			port = server.RANDOM_PORT // to nats-server, 0 means its default, 4222
		} else {
			// The server reports a port in use only in its log, and then
			// is never ready: say so at once, in the error.
			l, err := net.Listen("tcp", cfg.Listen)
			if err != nil {
				return nil, fmt.Errorf("natsserver: %w", err)
			}
			_ = l.Close()
		}
		opts.DontListen, opts.Host, opts.Port = false, host, port
	}

	srv := &Server{opts: opts, log: logger, astro: cfg.Passwords.Astro}
	if cfg.SyncAlways && groupCommit {
		if err := os.MkdirAll(cfg.StoreDir, 0o750); err != nil {
			return nil, fmt.Errorf("natsserver: %w", err)
		}
		store, err := os.Open(cfg.StoreDir)
		if err != nil {
			return nil, fmt.Errorf("natsserver: %w", err)
		}
		srv.store = store
		// Detached: a request leaves at its deadline even when the disk
		// holds its fsync.
		srv.group = rounds.NewDetached(func(string) (struct{}, error) { return struct{}{}, syncStore(store) })
	}
	ns, err := run(ctx, opts.Clone(), logger)
	if err != nil {
		srv.closeStore()
		return nil, fmt.Errorf("natsserver: %w", err)
	}
	srv.ns = ns
	// A restart keeps what this start chose: the port, where TCP clients
	// reconnect, and JetStream's limits, which a start computes from the
	// disk's free space: after a full disk, a limit that refuses every
	// write for good, with the health check all clear.
	if addr, ok := ns.Addr().(*net.TCPAddr); ok {
		opts.Port = addr.Port
	}
	js := ns.JetStreamConfig()
	opts.JetStreamMaxStore, opts.JetStreamMaxMemory = js.MaxStore, js.MaxMemory
	return srv, nil
}

// run starts a server on opts and waits until it is ready for connections.
func run(ctx context.Context, opts *server.Options, logger *slog.Logger) (*server.Server, error) {
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, err
	}
	ns.SetLoggerV2(slogLogger{logger}, false, false, false)
	ns.Start()
	if err := waitReady(ctx, ns); err != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, err
	}
	return ns, nil
}

// Sync returns once every append the store acknowledged before the call is
// on disk: one fsync of the store for all the callers waiting at the time
// (see Config.SyncAlways). Without SyncAlways, or where JetStream syncs
// each append itself, there is nothing to wait for.
func (s *Server) Sync(ctx context.Context) error {
	if s.group == nil {
		return nil
	}
	_, err := s.group.Do(ctx, "")
	return err
}

func (s *Server) closeStore() {
	if s.store != nil {
		_ = s.store.Close()
	}
}

func waitReady(ctx context.Context, ns *server.Server) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	// Short waits, so that a cancelled ctx is noticed.
	for !ns.ReadyForConnections(50 * time.Millisecond) {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("server not ready for connections (see its log): %w", err)
		}
	}
	if !ns.JetStreamEnabled() {
		return errors.New("JetStream did not start (see the server log)")
	}
	return nil
}

// Connect opens an in-process connection, which bypasses TCP entirely, as
// UserAstro when authentication is on. It reconnects across a restart of
// the server (heal.go) as a TCP connection would.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	base := []nats.Option{nats.InProcessServer(s)}
	if s.astro != "" {
		base = append(base, nats.UserInfo(UserAstro, s.astro))
	}
	nc, err := nats.Connect("", append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("natsserver: connect in-process: %w", err)
	}
	return nc, nil
}

// InProcessConn is a connection to the server running, for nats.go, which
// asks at every connect and reconnect; during a restart it waits for its
// end.
func (s *Server) InProcessConn() (net.Conn, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ns.InProcessConn()
}

// ClientURL is the URL for TCP clients, "" when Listen is off. A wildcard
// listen address is reported as loopback, which is what a local client can
// dial.
func (s *Server) ClientURL() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	addr, ok := s.ns.Addr().(*net.TCPAddr)
	if !ok {
		return ""
	}
	ip := addr.IP
	switch {
	case ip.IsUnspecified() && ip.To4() != nil:
		ip = net.IPv4(127, 0, 0, 1)
	case ip.IsUnspecified():
		ip = net.IPv6loopback
	}
	return "nats://" + net.JoinHostPort(ip.String(), strconv.Itoa(addr.Port))
}

// Shutdown stops the server gracefully and waits until it is down.
func (s *Server) Shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
	s.closeStore()
}

// slogLogger adapts slog to nats-server's logger interface. Notices (startup
// banners and the like) go to debug so that a running server is quiet.
type slogLogger struct{ l *slog.Logger }

func (a slogLogger) log(level slog.Level, format string, v []any) {
	ctx := context.Background()
	if a.l.Enabled(ctx, level) {
		a.l.Log(ctx, level, fmt.Sprintf(format, v...), "component", "nats")
	}
}

func (a slogLogger) Noticef(format string, v ...any) { a.log(slog.LevelDebug, format, v) }
func (a slogLogger) Warnf(format string, v ...any)   { a.log(slog.LevelWarn, format, v) }
func (a slogLogger) Errorf(format string, v ...any)  { a.log(slog.LevelError, format, v) }
func (a slogLogger) Debugf(format string, v ...any)  { a.log(slog.LevelDebug, format, v) }
func (a slogLogger) Tracef(format string, v ...any)  { a.log(slog.LevelDebug, format, v) }

// Fatalf only logs: nats-server returns after it, and exiting the program is
// not the server's call.
func (a slogLogger) Fatalf(format string, v ...any) { a.log(slog.LevelError, format, v) }
