package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq" // the "postgres" driver
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"astro/api/metrics"
	"astro/events/natslog"
	"astro/events/natsserver"
	"astro/projections"
	"astro/projections/pgconn"
	"astro/projections/pgserver"
)

// infra is what the service runs on: the data directory's lock, metrics,
// the tracer, NATS, the database and the event log over NATS. Close gives
// it all back.
type infra struct {
	metered *metrics.Metrics
	tracer  trace.Tracer // nil without tracing
	nc      *nats.Conn
	db      *sqlx.DB
	evlog   *natslog.Log // the event log
	// syncLog makes an acknowledged append durable: the embedded server's
	// grouped fsyncs with ASTRO_LOG_SYNC=always; nil otherwise.
	syncLog func(context.Context) error
	// embedded is the NATS server running in the program; nil with
	// ASTRO_NATS_URL.
	embedded *natsserver.Server

	// closers undo what openInfra did, in the order it did it; Close runs
	// them backwards.
	closers []func()
}

// openInfra opens the infrastructure cfg asks for. On an error part way,
// it closes what it had opened before returning.
func openInfra(ctx context.Context, cfg Config, log *slog.Logger) (_ *infra, err error) {
	inf := &infra{}
	defer func() {
		if err != nil {
			inf.Close()
		}
	}()

	if cfg.DataDir != "" {
		// World-traversable, so the private PostgreSQL (which runs as another
		// user when Astro runs as root) can keep its cluster inside it.
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return nil, fmt.Errorf("data dir: %w", err)
		}
		release, err := lockDataDir(cfg.DataDir)
		if err != nil {
			return nil, err
		}
		inf.onClose(release)
	}
	if inf.metered, err = metrics.New(prometheus.NewRegistry(), log); err != nil {
		return nil, err
	}
	tp := cfg.TracerProvider
	if tp == nil && cfg.Tracing {
		otlp, err := otlpTracerProvider(ctx)
		if err != nil {
			return nil, err
		}
		inf.onClose(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := otlp.Shutdown(ctx); err != nil {
				log.Warn("trace exporter shutdown", "err", err)
			}
		})
		tp = otlp
		log.Info("tracing on: spans exported over OTLP")
	}
	inf.tracer = tracer(tp)
	if inf.nc, err = inf.connectNATS(ctx, cfg, log); err != nil {
		return nil, err
	}
	if inf.db, err = inf.openDatabase(ctx, cfg, log); err != nil {
		return nil, err
	}
	if err := projections.Migrate(ctx, inf.db); err != nil {
		return nil, err
	}
	applied, err := appliedSeq(ctx, inf.db)
	if err != nil {
		return nil, err
	}
	// An empty stream created over a log the read models have seen would
	// hide its loss: without the stream, Astro does not start.
	err = whileLogStarts(ctx, log, "event streams", func(ctx context.Context) (err error) {
		inf.evlog, err = natslog.Open(ctx, inf.nc, natslog.Config{Replicas: cfg.StreamReplicas, MustExist: applied > 0, Logger: log, Metrics: inf.metered.Log(), Tracer: inf.tracer, Sync: inf.syncLog})
		return err
	})
	if errors.Is(err, natslog.ErrStreamMissing) {
		return nil, fmt.Errorf("%w, but the read models have applied events up to sequence %d: the log was lost or this is the wrong NATS server; restore the stream (or point ASTRO_NATS_URL at the right server) rather than start on an empty log", err, applied)
	}
	if err != nil && !inf.nc.IsConnected() {
		// The log says only that there is no connection (a refused
		// password closes it); why is the connection's to say.
		why := inf.nc.LastError()
		if why == nil {
			why = errors.New("no connection")
		}
		return nil, fmt.Errorf("NATS at %s: %w (%w)", redactURL(cfg.NATSURL), why, err)
	}
	if err != nil {
		return nil, err
	}
	if v := inf.nc.ConnectedServerVersion(); !natsAtLeast(v, minNATS) {
		return nil, fmt.Errorf("NATS at %s is version %s; Astro needs %s or later (its projectors move their consumers back with the consumer reset API, which older servers do not have)", redactURL(cfg.NATSURL), v, minNATS)
	}
	return inf, nil
}

// minNATS is the oldest NATS server Astro runs on: 2.14 brought the
// consumer reset API (ADR-60), with which a projector moves its consumer
// back to its checkpoint after a crash. On an older server that reset
// fails for good, and the read model stops.
const minNATS = "2.14.0"

// natsAtLeast reports whether server version v ("2.15.2", "2.14.0-beta")
// is min or later; an unreadable one is taken as later, since the
// server's own answers then decide.
func natsAtLeast(v, min string) bool {
	parse := func(s string) (out [3]int, ok bool) {
		s, _, _ = strings.Cut(s, "-")
		parts := strings.Split(s, ".")
		if len(parts) != 3 {
			return out, false
		}
		for i, p := range parts {
			n, err := strconv.Atoi(p)
			if err != nil {
				return out, false
			}
			out[i] = n
		}
		return out, true
	}
	got, ok := parse(v)
	want, _ := parse(min)
	if !ok {
		return true
	}
	for i := range got {
		if got[i] != want[i] {
			return got[i] > want[i]
		}
	}
	return true
}

// logStartWait bounds how long a starting service waits for an event log
// passing through a fault. A cluster that lost a node elects new stream
// leaders within seconds, and a service (re)started meanwhile should come
// up after them rather than exit; NATS itself may also still be starting.
const logStartWait = time.Minute

// whileLogStarts runs open, what the service needs of the log to start,
// again while it fails with a transient error, for up to logStartWait.
// An attempt gets 2 s: a log electing leaders answers nothing, and waiting
// out the client's 5 s for each attempt would double the wait.
func whileLogStarts(ctx context.Context, log *slog.Logger, what string, open func(context.Context) error) error {
	deadline := time.Now().Add(logStartWait)
	wait := 100 * time.Millisecond
	for {
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := open(attempt)
		cancel()
		if err == nil || !natslog.Transient(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		log.Warn("event log unavailable at start, waiting", "for", what, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// onClose has Close run f, before whatever was added earlier.
func (inf *infra) onClose(f func()) { inf.closers = append(inf.closers, f) }

// Close tears down what openInfra opened, in the reverse order. A second
// call does nothing.
func (inf *infra) Close() {
	for i := len(inf.closers) - 1; i >= 0; i-- {
		inf.closers[i]()
	}
	inf.closers = nil
}

// natsPingInterval is how often Astro's NATS connection asks the server
// whether it is there.
const natsPingInterval = 5 * time.Second

func (inf *infra) connectNATS(ctx context.Context, cfg Config, log *slog.Logger) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name("astro"), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond),
		// A node gone silent without closing the socket (stopped, or cut
		// off by a partition) is noticed within seconds and left for
		// another: with the defaults, two unanswered pings two minutes
		// apart, every request waited for its deadline for five minutes.
		nats.PingInterval(natsPingInterval), nats.MaxPingsOutstanding(2),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err == nil && nc.IsClosed() {
				return // Astro's own close, at shutdown
			}
			log.Warn("NATS disconnected", "err", err)
		}),
		nats.ReconnectHandler(func(*nats.Conn) { log.Info("NATS reconnected") }),
		nats.ClosedHandler(func(nc *nats.Conn) {
			if err := nc.LastError(); err != nil {
				log.Error("NATS connection closed", "err", err) // a refused password, for one
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { log.Error("NATS", "err", err) }),
	}
	if cfg.NATSURL != "" {
		if cfg.NATSUser != "" {
			opts = append(opts, nats.UserInfo(cfg.NATSUser, cfg.NATSPassword))
		}
		if cfg.NATSCreds != "" {
			opts = append(opts, nats.UserCredentials(cfg.NATSCreds))
		}
		nc, err := nats.Connect(cfg.NATSURL, append(opts, nats.RetryOnFailedConnect(true))...)
		if err != nil {
			return nil, fmt.Errorf("connect to NATS at %s: %w", redactURL(cfg.NATSURL), err)
		}
		inf.onClose(func() { drain(nc) })
		return nc, nil
	}
	passwords, err := natsPasswords(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	srv, err := natsserver.Start(ctx, natsserver.Config{
		StoreDir: filepath.Join(cfg.DataDir, "nats"), Listen: cfg.NATSListen, SyncAlways: cfg.LogSyncAlways,
		Passwords: passwords, ProtectedConsumers: protectedConsumers(), Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	inf.onClose(srv.Shutdown)
	inf.embedded = srv
	if cfg.LogSyncAlways {
		inf.syncLog = srv.Sync
	}
	urlFile := filepath.Join(cfg.DataDir, natsURLFile)
	if u := srv.ClientURL(); u != "" {
		if err := os.WriteFile(urlFile, []byte(u+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("embedded NATS: %w", err)
		}
		inf.onClose(func() { _ = os.Remove(urlFile) })
		log.Info("embedded NATS accepts clients with credentials (astro nats-credentials)", "url", u)
	} else {
		_ = os.Remove(urlFile) // a crashed run's
	}
	nc, err := srv.Connect(opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to embedded NATS: %w", err)
	}
	inf.onClose(func() { drain(nc) })
	return nc, nil
}

// drain drains nc and waits a moment for it to close. Drain alone returns
// at once, and the embedded server, shut down next, cut the connection
// under it: a warning in every clean stop's log.
func drain(nc *nats.Conn) {
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	if err := nc.Drain(); err != nil {
		nc.Close()
		return
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		nc.Close()
	}
}

func (inf *infra) openDatabase(ctx context.Context, cfg Config, log *slog.Logger) (*sqlx.DB, error) {
	url := cfg.DatabaseURL
	if url == "" {
		pg, err := pgserver.Start(ctx, pgserver.Config{DataDir: filepath.Join(cfg.DataDir, "postgres"), Logger: log})
		if err != nil {
			if errors.Is(err, pgserver.ErrNoBinaries) {
				return nil, fmt.Errorf("no PostgreSQL binaries found (PATH, /usr/lib/postgresql/*/bin): install PostgreSQL, or set ASTRO_DATABASE_URL to a database")
			}
			return nil, fmt.Errorf("private PostgreSQL: %w", err)
		}
		inf.onClose(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := pg.Stop(ctx); err != nil {
				log.Warn("stop PostgreSQL", "err", err)
			}
		})
		url = pg.URL()
		// Tools on this machine (astro projections status) find the private
		// database here, as they find the embedded NATS server.
		urlFile := filepath.Join(cfg.DataDir, postgresURLFile)
		if err := os.WriteFile(urlFile, []byte(url+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("private PostgreSQL: %w", err)
		}
		inf.onClose(func() { _ = os.Remove(urlFile) })
	}
	db, err := pgconn.Open(url)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	inf.onClose(func() { db.Close() })
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	db.SetConnMaxIdleTime(5 * time.Minute)
	// The database may still be starting (a container, a restart): wait.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := db.PingContext(ctx)
		if err == nil {
			return db, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("database unreachable: %w", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}
