package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"astro/api"
)

// serve runs the service until ctx ends, then shuts every part down.
func serve(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	log := newLogger(cfg, stderr)
	s, err := start(ctx, cfg, log)
	if err != nil && ctx.Err() != nil {
		// Told to stop while starting (waiting for its log, say): the
		// start's error would blame what it was waiting for.
		log.Info("astro stopped while starting", "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	defer s.Close()
	// Scripts (the fault suite among them) and people read the addresses
	// here: with port 0 this is the only place they are told.
	if s.MetricsAddr() != "" {
		fmt.Fprintf(stdout, "astro: metrics on %s/metrics\n", s.MetricsAddr())
	}
	if s.DebugAddr() != "" {
		fmt.Fprintf(stdout, "astro: profiles on %s/debug/pprof/\n", s.DebugAddr())
	}
	fmt.Fprintf(stdout, "astro: listening on %s\n", s.Addr())
	err = s.Run(ctx)
	log.Info("astro stopped", "err", err)
	return err
}

// newLogger is the service's logger: text lines on w, at cfg's level.
func newLogger(cfg Config, w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: cfg.LogLevel}))
}

// instance is the service started: its infrastructure open, its application
// built, and its addresses listened on, ready to Run.
type instance struct {
	cfg   Config
	infra *infra
	app   *app

	http *http.Server
	ln   net.Listener
	// metrics and metricsLn serve /metrics apart, when cfg.MetricsAddr asks
	// for it; nil otherwise (the API serves it).
	metrics   *http.Server
	metricsLn net.Listener
	// debug and debugLn serve Go's profiles, when cfg.DebugAddr asks for
	// them; nil otherwise.
	debug   *http.Server
	debugLn net.Listener
}

// start opens the infrastructure, builds the application on it and listens
// on the HTTP address (and the metrics address, when set); requests wait
// in the listener's queue until Run. ctx bounds the start and lives on in
// what the application keeps running in the background (a JWKS key set's
// refresh): give start the context Run gets. On an error, start closes
// what it opened.
func start(ctx context.Context, cfg Config, log *slog.Logger) (_ *instance, err error) {
	s := &instance{cfg: cfg}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.infra, err = openInfra(ctx, cfg, log); err != nil {
		return nil, err
	}
	if s.app, err = newApp(ctx, cfg, s.infra, log); err != nil {
		return nil, err
	}

	if s.ln, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	s.http = &http.Server{
		Handler:           s.app.api,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       cfg.RequestTimeout,
		WriteTimeout:      cfg.RequestTimeout + 5*time.Second, // the 503 of a request past its deadline still gets out
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 20, // the API refuses over 64 KiB itself, in the envelope
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// Shutdown waits for requests to end, and a stream never would.
	s.http.RegisterOnShutdown(s.app.api.CloseStreams)

	if cfg.MetricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", s.infra.metered.Handler())
		if s.metrics, s.metricsLn, err = sideServer(cfg.MetricsAddr, mux, 30*time.Second, log); err != nil {
			return nil, err
		}
	}
	if cfg.DebugAddr != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		// A CPU profile or a trace takes as long as it is asked to.
		if s.debug, s.debugLn, err = sideServer(cfg.DebugAddr, mux, 0, log); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// sideServer listens on addr for an operator's server apart from the API.
func sideServer(addr string, h http.Handler, writeTimeout time.Duration, log *slog.Logger) (*http.Server, net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: writeTimeout,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}, ln, nil
}

// Addr is the HTTP API's base URL, http://host:port.
func (s *instance) Addr() string { return "http://" + s.ln.Addr().String() }

// MetricsAddr is the base URL of the server of /metrics when it is apart
// from the API (cfg.MetricsAddr), "" when the API serves them.
func (s *instance) MetricsAddr() string {
	if s.metricsLn == nil {
		return ""
	}
	return "http://" + s.metricsLn.Addr().String()
}

// DebugAddr is the base URL of the server of Go's profiles, "" when
// cfg.DebugAddr does not ask for one.
func (s *instance) DebugAddr() string {
	if s.debugLn == nil {
		return ""
	}
	return "http://" + s.debugLn.Addr().String()
}

// healEvery is how often the embedded NATS server's store is checked for a
// failed write, which only a restart of the server clears (natsserver.Watch):
// a full disk freed, the log takes writes within two of these.
const healEvery = 2 * time.Second

// Run serves until ctx ends or a part of the service fails, then shuts the
// HTTP servers down, giving requests in flight cfg.ShutdownGrace, and
// waits for every part to stop. It returns nil when ctx ended it. Call it
// once.
func (s *instance) Run(ctx context.Context) error {
	var g group
	s.app.addTo(&g)
	if srv := s.infra.embedded; srv != nil {
		g.add(func(ctx context.Context) error { return srv.Watch(ctx, healEvery) })
	}
	if s.metrics != nil {
		g.add(func(ctx context.Context) error {
			return serveHTTP(ctx, s.metrics, s.metricsLn, s.cfg.ShutdownGrace, "metrics http")
		})
	}
	if s.debug != nil {
		g.add(func(ctx context.Context) error {
			return serveHTTP(ctx, s.debug, s.debugLn, s.cfg.ShutdownGrace, "debug http")
		})
	}
	g.add(func(ctx context.Context) error {
		return serveHTTP(ctx, s.http, s.ln, s.cfg.ShutdownGrace, "http")
	})
	return g.run(ctx)
}

// serveHTTP serves ln until ctx ends, then shuts srv down within grace.
func serveHTTP(ctx context.Context, srv *http.Server, ln net.Listener, grace time.Duration, what string) error {
	// Requests cut off when the grace is up say why in the log, not that
	// their client went away.
	base, cutOff := context.WithCancelCause(context.Background())
	defer cutOff(nil)
	srv.BaseContext = func(net.Listener) context.Context { return base }
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("%s: %w", what, err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		// The grace ran out with requests still running: end them here,
		// before the parts they use stop under them, and say so.
		cutOff(api.ErrCutOff)
		_ = srv.Close()
		return fmt.Errorf("%s shutdown: requests still running after the %v grace were cut off: %w", what, grace, err)
	}
	return nil
}

// Close gives back what start took: the listeners, if Run did not already
// close them, then the infrastructure, in the reverse order it was opened.
// Call it after Run returned, or instead of Run.
func (s *instance) Close() {
	for _, ln := range []net.Listener{s.debugLn, s.metricsLn, s.ln} {
		if ln != nil {
			_ = ln.Close() // already closed when Run served on it
		}
	}
	if s.infra != nil {
		s.infra.Close()
	}
}
