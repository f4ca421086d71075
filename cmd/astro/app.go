package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"

	"astro/api"
	"astro/api/auth"
	"astro/api/idempotency"
	"astro/api/metrics"
	"astro/api/natscmd"
	"astro/commands"
	"astro/commands/erasure"
	"astro/commands/holidays"
	"astro/commands/notifications"
	"astro/events"
	"astro/projections"
	"astro/query"
	"astro/query/country"
	"astro/query/history"
)

// app is the service over its infrastructure: the aggregate stores and
// command handlers, the projectors and queries over their read models, and
// the two ways in, the HTTP API and NATS commands. Its long-running parts
// run in a group (addTo); it holds nothing of its own to close (its
// subscriptions end with the connection).
type app struct {
	api         *api.Server
	cmds        *natscmd.Server
	runners     []*projections.Runner
	eraser      *erasure.Eraser
	compactor   *notifications.Compactor
	compactions *query.Compactions
	cfg         Config
	log         *slog.Logger
}

// newApp builds the application on inf. ctx bounds what it reads while
// starting and, with a JWKS URL, the key set's refresh in the background:
// give it the context the service runs under.
func newApp(ctx context.Context, cfg Config, inf *infra, log *slog.Logger) (*app, error) {
	evlog, db, nc, metered, tr := inf.evlog, inf.db, inf.nc, inf.metered, inf.tracer
	inboxes, err := commands.NewStore(evlog, evlog.Snapshots(), notifications.NewInbox, commands.StoreConfig{Name: notifications.SnapshotName, Logger: log, Metrics: metered.Store(events.KindInbox)})
	if err != nil {
		return nil, err
	}
	now := time.Now
	notify, err := notifications.NewHandlers(inboxes, now)
	if err != nil {
		return nil, err
	}
	compactor, err := notifications.NewCompactor(inboxes, evlog, evlog, evlog.ErasureLedger(), now, notifications.CompactorConfig{EraseWithin: cfg.EraseWithin, Logger: log})
	if err != nil {
		return nil, err
	}
	eraser, err := erasure.New(evlog, evlog.Snapshots(), evlog.ErasureLedger(), compactor, now, log)
	if err != nil {
		return nil, err
	}

	holidayStore, err := commands.NewStore(evlog, evlog.Snapshots(), holidays.NewHoliday, commands.StoreConfig{Name: holidays.HolidaySnapshotName, Logger: log, Metrics: metered.Store(events.KindHoliday)})
	if err != nil {
		return nil, err
	}
	resourceStore, err := commands.NewStore(evlog, evlog.Snapshots(), holidays.NewResource, commands.StoreConfig{Name: holidays.ResourceSnapshotName, Logger: log, Metrics: metered.Store(events.KindResource)})
	if err != nil {
		return nil, err
	}
	holidayCmds, err := holidays.NewHandlers(holidayStore, resourceStore, country.Valid, now)
	if err != nil {
		return nil, err
	}

	var runners []*projections.Runner
	var sources []metrics.StatusSource
	byName := map[string]*projections.Runner{}
	scopesSeen := query.NewScopesSeen()   // the history stream as the holidays projector receives it
	inboxesSeen := query.NewInboxesSeen() // the inbox stream as the notifications projector receives it
	for _, reg := range projections.Registered() {
		p, err := reg.New(ctx, db)
		if err != nil {
			return nil, err
		}
		runCfg := projections.RunnerConfig{Stream: evlog.Stream(reg.Kinds[0]), Parking: evlog, Logger: log, Metrics: metered.Projector(p.Name()), Tracer: tr}
		switch reg.Name {
		case projections.HolidaysName:
			runCfg.Watch = scopesSeen
		case projections.NotificationsName:
			runCfg.Watch = inboxesSeen
		}
		r, err := projections.NewRunner(evlog.JetStream(), db, p, runCfg)
		if err != nil {
			return nil, err
		}
		runners = append(runners, r)
		sources = append(sources, r)
		byName[p.Name()] = r
	}
	if err := metered.WatchProjectors(2*time.Second, sources...); err != nil {
		return nil, err
	}
	notifRunner, holidayRunner := byName[projections.NotificationsName], byName[projections.HolidaysName]
	if notifRunner == nil || holidayRunner == nil {
		// A nil *Runner would pass the api's checks as a non-nil Waiter,
		// and the first read would panic.
		return nil, fmt.Errorf("projectors %s and %s must both be registered", projections.NotificationsName, projections.HolidaysName)
	}

	notifQueries, err := query.NewNotifications(ctx, db, inboxesSeen)
	if err != nil {
		return nil, err
	}
	holidayQueries, err := query.NewHolidays(ctx, db)
	if err != nil {
		return nil, err
	}
	holidayCmds.LimitWorkspaces(holidayQueries, holidays.DefaultWorkspaceResourceDays, holidays.DefaultWorkspaceHolidayDays)
	resourceQueries, err := query.NewResources(ctx, db, scopesSeen)
	if err != nil {
		return nil, err
	}
	// A redrive on whichever instance applies a projector changes its read
	// model where the log does not move: every instance forgets what it
	// remembered of it.
	for name, forget := range map[string]func(){projections.NotificationsName: notifQueries.Forget, projections.HolidaysName: resourceQueries.Forget} {
		if _, err := nc.Subscribe(projections.RedrivenSubject(name), func(*nats.Msg) { forget() }); err != nil {
			return nil, fmt.Errorf("subscribe to %s redrives: %w", name, err)
		}
	}
	// Those messages are NATS's at most once: one sent while this
	// instance reconnected is lost, so a reconnect forgets it all too.
	reconnected := nc.Opts.ReconnectedCB
	nc.SetReconnectHandler(func(c *nats.Conn) {
		if reconnected != nil {
			reconnected(c)
		}
		notifQueries.Forget()
		resourceQueries.Forget()
	})
	compactions, err := query.NewCompactions(ctx, db)
	if err != nil {
		return nil, err
	}
	holidayHistory, err := history.NewHolidays(evlog)
	if err != nil {
		return nil, err
	}
	var idem *idempotency.Store
	err = whileLogStarts(ctx, log, "idempotency records", func(ctx context.Context) (err error) {
		idem, err = idempotency.Open(ctx, evlog.JetStream(), idempotency.Config{Replicas: cfg.StreamReplicas})
		return err
	})
	if err != nil {
		return nil, err
	}
	authCfg, err := authConfig(cfg, now, log)
	if err != nil {
		return nil, err
	}
	verifier, err := auth.NewVerifier(ctx, authCfg)
	if err != nil {
		return nil, err
	}
	streamKey, err := ticketKey(cfg.StreamTicketKey, cfg.DataDir)
	if err != nil {
		return nil, err
	}
	ready := func(ctx context.Context) error {
		if !nc.IsConnected() {
			return logNotReady(errors.New("NATS is not connected"))
		}
		if err := evlog.Ping(ctx); err != nil {
			return logNotReady(err)
		}
		if inf.embedded != nil {
			if err := inf.embedded.Healthy(); err != nil {
				return logNotReady(err)
			}
		}
		if err := db.PingContext(ctx); err != nil {
			// What is wrong, not how: the driver's words stay in the log.
			return &commands.Error{Code: commands.EUnavailable, Message: "the database is unreachable", Err: err}
		}
		for _, r := range runners {
			if !r.Ready() {
				return &commands.Error{Code: commands.EUnavailable, Message: fmt.Sprintf("projector %s is starting", r.Name())}
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
	// One budget per caller, whichever way its requests come in.
	limiter := api.NewRateLimiter(cfg.RateLimit, cfg.RateBurst, now)
	apiServer, err := api.New(api.Config{
		Verifier: verifier, Notifications: notify, NotificationQueries: notifQueries,
		NotificationsProjected: notifRunner, Inboxes: inboxes, InboxLog: evlog,
		Streams: api.StreamConfig{
			TicketKey: streamKey, TicketTTL: cfg.StreamTicketTTL, PerUser: cfg.StreamsPerUser, Max: cfg.StreamsMax, Heartbeat: cfg.StreamHeartbeat,
		},
		Holidays: holidayCmds, HolidayQueries: holidayQueries, HolidayHistory: holidayHistory, HolidaysProjected: holidayRunner,
		// The stream ticket key seals positions too (it derives the seal's
		// own keys): both must be the same on every instance.
		Resources: resourceQueries, Log: evlog, PositionKey: streamKey, Erasure: eraser,
		Idempotency: idem, RateLimiter: limiter, Now: now,
		Ready: ready, Logger: log, RequestTimeout: cfg.RequestTimeout,
		Metrics: metered, MetricsHandler: metricsHandler, Tracer: tr,
	})
	if err != nil {
		return nil, err
	}
	cmds, err := natscmd.New(nc, natscmd.Config{
		Notifications: notify, Verifier: verifier, Idempotency: idem, RateLimiter: limiter, Logger: log,
		Answers: api.SendAnswers{Queries: notifQueries, Projected: notifRunner, Wait: 5 * time.Second, Log: log},
	})
	if err != nil {
		return nil, err
	}
	return &app{api: apiServer, cmds: cmds, runners: runners, eraser: eraser, compactor: compactor,
		compactions: compactions, cfg: cfg, log: log}, nil
}

// erasureAbandoned is how long ago an erasure not done must have begun (or
// last renewed its entry, after each inbox) for the background to take it
// for cut short (its request's deadline, a failure) and finish it: past
// any request's bound and the shutdown's grace, and at least 2 minutes.
func (a *app) erasureAbandoned() time.Duration {
	return max(2*time.Minute, a.cfg.RequestTimeout+a.cfg.ShutdownGrace+time.Minute)
}

// addTo adds the application's long-running parts to g: the NATS command
// handler, the erasures and inbox compactions, and the projectors, which
// stop last.
func (a *app) addTo(g *group) {
	for _, r := range a.runners {
		g.addLast(r.Run)
	}
	g.add(a.cmds.Run)
	g.add(func(ctx context.Context) error {
		if err := a.eraser.Finish(ctx, time.Time{}); err != nil && ctx.Err() == nil {
			a.log.Warn("finishing workspace erasures a stop cut short; trying again later", "err", err)
		}
		return a.compactor.Run(ctx, dueInboxes{a.compactions}, notifications.Schedule{Every: a.cfg.CompactEvery, Abandoned: a.erasureAbandoned()})
	})
	g.add(func(ctx context.Context) error { return a.eraser.Run(ctx, time.Minute, a.erasureAbandoned()) })
}

// dueInboxes lists the inboxes due for compaction from the read model.
type dueInboxes struct{ q *query.Compactions }

func (d dueInboxes) Due(ctx context.Context, events int, olderThan time.Time, idle bool, limit int) ([]notifications.DueInbox, error) {
	in, err := d.q.Due(ctx, events, olderThan, idle, limit)
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
