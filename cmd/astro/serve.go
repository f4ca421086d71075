package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq" // the "postgres" driver
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"astro/api"
	"astro/api/auth"
	"astro/api/idempotency"
	"astro/api/natscmd"
	"astro/commands"
	"astro/commands/erasure"
	"astro/commands/holidays"
	"astro/commands/notifications"
	"astro/events"
	"astro/events/natslog"
	"astro/events/natsserver"
	"astro/metrics"
	"astro/projections"
	"astro/projections/pgserver"
	"astro/query"
	"astro/query/country"
	"astro/query/history"
)

// serve runs the service until ctx ends, then shuts every part down.
func serve(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	var cleanup []func()
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}()

	if cfg.DataDir != "" {
		// World-traversable, so the private PostgreSQL (which runs as another
		// user when Astro runs as root) can keep its cluster inside it.
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return fmt.Errorf("data dir: %w", err)
		}
		release, err := lockDataDir(cfg.DataDir)
		if err != nil {
			return err
		}
		cleanup = append(cleanup, release)
	}
	metered, err := metrics.New(prometheus.NewRegistry(), log)
	if err != nil {
		return err
	}
	tp := cfg.TracerProvider
	if tp == nil && cfg.Tracing {
		otlp, err := otlpTracerProvider(ctx)
		if err != nil {
			return err
		}
		cleanup = append(cleanup, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := otlp.Shutdown(ctx); err != nil {
				log.Warn("trace exporter shutdown", "err", err)
			}
		})
		tp = otlp
		log.Info("tracing on: spans exported over OTLP")
	}
	tr := tracer(tp)
	nc, err := connectNATS(ctx, cfg, log, &cleanup)
	if err != nil {
		return err
	}
	db, err := openDatabase(ctx, cfg, log, &cleanup)
	if err != nil {
		return err
	}
	if err := projections.Migrate(ctx, db); err != nil {
		return err
	}
	applied, err := appliedSeq(ctx, db)
	if err != nil {
		return err
	}
	// An empty stream created over a log the read models have seen would
	// hide its loss: without the stream, Astro does not start.
	evlog, err := natslog.Open(ctx, nc, natslog.Config{Replicas: cfg.StreamReplicas, MustExist: applied > 0, Logger: log, Metrics: metered.Log(), Tracer: tr})
	if errors.Is(err, natslog.ErrStreamMissing) {
		return fmt.Errorf("%w, but the read models have applied events up to sequence %d: the log was lost or this is the wrong NATS server; restore the stream (or point ASTRO_NATS_URL at the right server) rather than start on an empty log", err, applied)
	}
	if err != nil {
		return err
	}

	inboxes, err := commands.NewStore(evlog, evlog.Snapshots(), notifications.NewInbox, commands.StoreConfig{Name: notifications.SnapshotName, Logger: log, Metrics: metered.Store(events.KindInbox)})
	if err != nil {
		return err
	}
	now := time.Now
	notify, err := notifications.NewHandlers(inboxes, now)
	if err != nil {
		return err
	}
	compactor, err := notifications.NewCompactor(inboxes, evlog, evlog, evlog.Pending(), now, notifications.CompactorConfig{EraseWithin: cfg.EraseWithin, Logger: log})
	if err != nil {
		return err
	}
	eraser, err := erasure.New(evlog, evlog.Snapshots(), evlog.Pending(), compactor, now, log)
	if err != nil {
		return err
	}

	holidayStore, err := commands.NewStore(evlog, evlog.Snapshots(), holidays.NewHoliday, commands.StoreConfig{Name: holidays.HolidaySnapshotName, Logger: log, Metrics: metered.Store(events.KindHoliday)})
	if err != nil {
		return err
	}
	resourceStore, err := commands.NewStore(evlog, evlog.Snapshots(), holidays.NewResource, commands.StoreConfig{Name: holidays.ResourceSnapshotName, Logger: log, Metrics: metered.Store(events.KindResource)})
	if err != nil {
		return err
	}
	holidayCmds, err := holidays.NewHandlers(holidayStore, resourceStore, country.Valid, now)
	if err != nil {
		return err
	}

	projectors, err := projections.NewAll(ctx, db)
	if err != nil {
		return err
	}
	var runners []*projections.Runner
	var sources []metrics.StatusSource
	byName := map[string]*projections.Runner{}
	regs := projections.Registered()
	for i, p := range projectors {
		runCfg := projections.RunnerConfig{Stream: evlog.Stream(regs[i].Kinds[0]), Parking: evlog, Logger: log, Metrics: metered.Projector(p.Name()), Tracer: tr}
		r, err := projections.NewRunner(evlog.JetStream(), db, p, runCfg)
		if err != nil {
			return err
		}
		runners = append(runners, r)
		sources = append(sources, r)
		byName[p.Name()] = r
	}
	if err := metered.WatchProjectors(2*time.Second, sources...); err != nil {
		return err
	}
	notifRunner, holidayRunner := byName["notifications"], byName["holidays"]

	notifQueries, err := query.NewNotifications(ctx, db)
	if err != nil {
		return err
	}
	holidayQueries, err := query.NewHolidays(ctx, db)
	if err != nil {
		return err
	}
	holidayCmds.LimitWorkspaces(holidayQueries, holidays.DefaultWorkspaceResourceDays, holidays.DefaultWorkspaceHolidayDays)
	resourceQueries, err := query.NewResources(ctx, db)
	if err != nil {
		return err
	}
	compactions, err := query.NewCompactions(ctx, db)
	if err != nil {
		return err
	}
	holidayHistory, err := history.NewHolidays(evlog)
	if err != nil {
		return err
	}
	idem, err := idempotency.Open(ctx, evlog.JetStream(), idempotency.Config{Replicas: cfg.StreamReplicas})
	if err != nil {
		return err
	}
	secret, err := jwtSecret(cfg.JWTSecret, cfg.JWKSURL, cfg.DataDir)
	if err != nil {
		return err
	}
	verifier, err := auth.NewVerifier(ctx, auth.Config{
		HS256Secret: secret, JWKSURL: cfg.JWKSURL, Issuer: cfg.JWTIssuer, Audience: cfg.JWTAudience, Now: now, Logger: log,
	})
	if err != nil {
		return err
	}
	streamKey, err := ticketKey(cfg.StreamTicketKey, cfg.DataDir)
	if err != nil {
		return err
	}
	ready := func(ctx context.Context) error {
		if !nc.IsConnected() {
			return logNotReady(errors.New("NATS is not connected"))
		}
		if err := evlog.Ping(ctx); err != nil {
			return logNotReady(err)
		}
		if err := db.PingContext(ctx); err != nil {
			return fmt.Errorf("database: %w", err)
		}
		for _, r := range runners {
			if !r.Ready() {
				return fmt.Errorf("projector %s is starting", r.Name())
			}
			if err := checkLag(ctx, r, cfg.ReadyMaxLagEvents, cfg.ReadyMaxLag); err != nil {
				return err
			}
		}
		return nil
	}
	var metricsHandler http.Handler
	if cfg.MetricsAddr == "" {
		metricsHandler = metered.Handler()
	}
	apiServer, err := api.New(api.Config{
		Verifier: verifier, Notifications: notify, NotificationQueries: notifQueries,
		NotificationsProjected: notifRunner, Inboxes: inboxes, InboxLog: evlog,
		Streams: api.StreamConfig{
			TicketKey: streamKey, TicketTTL: cfg.StreamTicketTTL, PerUser: cfg.StreamsPerUser, Max: cfg.StreamsMax, Heartbeat: cfg.StreamHeartbeat,
		},
		Holidays: holidayCmds, HolidayQueries: holidayQueries, HolidayHistory: holidayHistory, HolidaysProjected: holidayRunner,
		Resources: resourceQueries, Log: evlog, Erasure: eraser,
		Idempotency: idem, RateLimit: cfg.RateLimit, RateBurst: cfg.RateBurst, Now: now,
		Ready: ready, Logger: log, RequestTimeout: cfg.RequestTimeout,
		Metrics: metered, MetricsHandler: metricsHandler, Tracer: tr,
	})
	if err != nil {
		return err
	}
	cmds, err := natscmd.New(nc, natscmd.Config{
		Notifications: notify, Verifier: verifier, Idempotency: idem, Logger: log,
		Answers: api.SendAnswers{Queries: notifQueries, Projected: notifRunner, Wait: 5 * time.Second, Log: log},
	})
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	httpServer := &http.Server{
		Handler:           apiServer,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       cfg.RequestTimeout,
		WriteTimeout:      cfg.RequestTimeout + 5*time.Second, // the 503 of a request past its deadline still gets out
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 20, // the API refuses over 64 KiB itself, in the envelope
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// Shutdown waits for requests to end, and a stream never would.
	httpServer.RegisterOnShutdown(apiServer.CloseStreams)

	var g group
	for _, r := range runners {
		g.add(r.Run)
	}
	g.add(cmds.Run)
	g.add(func(ctx context.Context) error {
		if err := eraser.Finish(ctx); err != nil && ctx.Err() == nil {
			log.Warn("finishing workspace erasures a stop cut short; they are finished at the next start", "err", err)
		}
		return compactor.Run(ctx, dueInboxes{compactions}, notifications.Schedule{Every: cfg.CompactEvery})
	})
	if cfg.MetricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", metered.Handler())
		mln, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", cfg.MetricsAddr, err)
		}
		metricsServer := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
		g.add(func(ctx context.Context) error {
			errc := make(chan error, 1)
			go func() { errc <- metricsServer.Serve(mln) }()
			fmt.Fprintf(stdout, "astro: metrics on http://%s/metrics\n", mln.Addr())
			select {
			case err := <-errc:
				return fmt.Errorf("metrics http: %w", err)
			case <-ctx.Done():
			}
			shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownGrace)
			defer cancel()
			return metricsServer.Shutdown(shutdownCtx)
		})
	}
	g.add(func(ctx context.Context) error {
		errc := make(chan error, 1)
		go func() { errc <- httpServer.Serve(ln) }()
		fmt.Fprintf(stdout, "astro: listening on http://%s\n", ln.Addr())
		select {
		case err := <-errc:
			return fmt.Errorf("http: %w", err)
		case <-ctx.Done():
		}
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownGrace)
		defer cancel()
		if err := httpServer.Shutdown(shutdownCtx); err != nil {
			return fmt.Errorf("http shutdown: %w", err)
		}
		return nil
	})
	err = g.run(ctx)
	log.Info("astro stopped", "err", err)
	return err
}

// dueInboxes lists the inboxes due for compaction from the read model.
type dueInboxes struct{ q *query.Compactions }

func (d dueInboxes) Due(ctx context.Context, events int, olderThan time.Time, limit int) ([]notifications.DueInbox, error) {
	in, err := d.q.Due(ctx, events, olderThan, limit)
	out := make([]notifications.DueInbox, len(in))
	for i, x := range in {
		out[i] = notifications.DueInbox{WorkspaceID: x.WorkspaceID, RecipientID: x.RecipientID}
	}
	return out, err
}

// checkLag refuses readiness while r lags past either bound (0: none),
// saying which projector and by how much: an instance whose read models
// are far behind answers reads late (each waits for its writes) and should
// get no traffic until it caught up.
func checkLag(ctx context.Context, r *projections.Runner, maxEvents uint64, maxAge time.Duration) error {
	if maxEvents == 0 && maxAge == 0 {
		return nil
	}
	st, err := r.Status(ctx)
	if err != nil {
		return logNotReady(err)
	}
	if maxEvents > 0 && st.LagEvents > maxEvents || maxAge > 0 && st.LagSeconds > maxAge.Seconds() {
		return &commands.Error{Code: commands.EUnavailable, Message: fmt.Sprintf(
			"projector %s lags %d events (oldest unapplied %.1fs old) behind the log, past the bound of %d events or %s",
			st.Projector, st.LagEvents, st.LagSeconds, maxEvents, maxAge)}
	}
	return nil
}

func connectNATS(ctx context.Context, cfg Config, log *slog.Logger, cleanup *[]func()) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name("astro"), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { log.Warn("NATS disconnected", "err", err) }),
		nats.ReconnectHandler(func(*nats.Conn) { log.Info("NATS reconnected") }),
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
		*cleanup = append(*cleanup, func() { _ = nc.Drain() })
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
	*cleanup = append(*cleanup, srv.Shutdown)
	urlFile := filepath.Join(cfg.DataDir, natsURLFile)
	if u := srv.ClientURL(); u != "" {
		if err := os.WriteFile(urlFile, []byte(u+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("embedded NATS: %w", err)
		}
		*cleanup = append(*cleanup, func() { _ = os.Remove(urlFile) })
		log.Info("embedded NATS accepts clients with credentials (astro nats-credentials)", "url", u)
	} else {
		_ = os.Remove(urlFile) // a crashed run's
	}
	nc, err := srv.Connect(opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to embedded NATS: %w", err)
	}
	*cleanup = append(*cleanup, func() { _ = nc.Drain() })
	return nc, nil
}

func openDatabase(ctx context.Context, cfg Config, log *slog.Logger, cleanup *[]func()) (*sqlx.DB, error) {
	url := cfg.DatabaseURL
	if url == "" {
		pg, err := pgserver.Start(ctx, pgserver.Config{DataDir: filepath.Join(cfg.DataDir, "postgres"), Logger: log})
		if err != nil {
			if errors.Is(err, pgserver.ErrNoBinaries) {
				return nil, fmt.Errorf("no PostgreSQL binaries found (PATH, /usr/lib/postgresql/*/bin): install PostgreSQL, or set ASTRO_DATABASE_URL to a database")
			}
			return nil, fmt.Errorf("private PostgreSQL: %w", err)
		}
		*cleanup = append(*cleanup, func() {
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
		*cleanup = append(*cleanup, func() { _ = os.Remove(urlFile) })
	}
	db, err := sqlx.Open("postgres", url)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	*cleanup = append(*cleanup, func() { db.Close() })
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
