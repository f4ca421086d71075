// Package metrics exposes Astro's Prometheus metrics. It owns every metric
// name and label; the domain and adapter packages report through small
// interfaces of their own (api.Metrics, commands.StoreMetrics,
// natslog.Metrics, projections.RunnerMetrics), which this package
// implements on a registry it is given, never the default one.
//
// Label values are resolved once, when a route, aggregate or projector is
// set up, so that recording costs an atomic add, not a label lookup.
package metrics

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"astro/api"
	"astro/commands"
	"astro/events"
	"astro/events/natslog"
	"astro/projections"
)

// Metrics records Astro's metrics in one registry.
type Metrics struct {
	reg *prometheus.Registry
	log *slog.Logger

	httpRequests  *prometheus.CounterVec
	httpDuration  *prometheus.HistogramVec
	rateLimited   prometheus.Counter
	workspaceBusy prometheus.Counter
	replays       prometheus.Counter

	appends       *prometheus.CounterVec
	appendOK      prometheus.Counter
	appendFailed  prometheus.Counter
	appendConfl   prometheus.Counter
	appendDup     prometheus.Counter
	appendTime    prometheus.Histogram
	appendRetries prometheus.Counter

	cacheHits, cacheMisses, retries, gaveUp *prometheus.CounterVec
	coldLoad                                *prometheus.HistogramVec

	batchSize, applyTime *prometheus.HistogramVec
	parked               *prometheus.CounterVec
}

// New registers Astro's metrics, and the Go runtime's and the process's,
// on reg.
func New(reg *prometheus.Registry, log *slog.Logger) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("metrics: New needs a registry")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fast := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}
	m := &Metrics{
		reg: reg, log: log,
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "astro_http_requests_total",
			Help: "HTTP requests answered, by method, route pattern and status code."}, []string{"method", "route", "code"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "astro_http_request_duration_seconds",
			Help: "Time to answer an HTTP request, by method, route pattern and status code.", Buckets: fast}, []string{"method", "route", "code"}),
		rateLimited: prometheus.NewCounter(prometheus.CounterOpts{Name: "astro_http_rate_limited_total",
			Help: "Requests refused with 429 by the per-caller rate limit."}),
		workspaceBusy: prometheus.NewCounter(prometheus.CounterOpts{Name: "astro_http_workspace_busy_total",
			Help: "Reads refused with 429 because their workspace had every read slot taken."}),
		replays: prometheus.NewCounter(prometheus.CounterOpts{Name: "astro_idempotent_replays_total",
			Help: "Writes answered from the stored answer of their Idempotency-Key."}),
		appends: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "astro_log_appends_total",
			Help: "Appends to the event log by outcome: ok, conflict (optimistic-concurrency check lost), duplicate (already appended) or error."}, []string{"outcome"}),
		appendTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "astro_log_append_duration_seconds",
			Help: "Time of an append to the event log, retries included.", Buckets: fast}),
		appendRetries: prometheus.NewCounter(prometheus.CounterOpts{Name: "astro_log_append_retries_total",
			Help: "Publishes retried after a passing failure (timeout, leader election, reconnect)."}),
		cacheHits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "astro_aggregate_cache_hits_total",
			Help: "Commands that found their aggregate in memory."}, []string{"aggregate"}),
		cacheMisses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "astro_aggregate_cache_misses_total",
			Help: "Aggregates loaded cold: a snapshot and the events after it."}, []string{"aggregate"}),
		coldLoad: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "astro_aggregate_cold_load_duration_seconds",
			Help: "Time to load an aggregate not in memory.", Buckets: fast}, []string{"aggregate"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "astro_command_retries_total",
			Help: "Commands decided again after their append lost an optimistic-concurrency race."}, []string{"aggregate"}),
		gaveUp: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "astro_command_conflicts_total",
			Help: "Commands that lost every retry and answered 409."}, []string{"aggregate"}),
		batchSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "astro_projector_batch_size",
			Help: "Events per batch a projector applied in one transaction.", Buckets: []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000}}, []string{"projector"}),
		applyTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "astro_projector_apply_duration_seconds",
			Help: "Time to apply and commit one batch.", Buckets: fast}, []string{"projector"}),
		parked: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "astro_projector_parked_events_total",
			Help: "Events a projector could not apply and parked (see astro events parked)."}, []string{"projector"}),
	}
	m.appendOK = m.appends.WithLabelValues("ok")
	m.appendConfl = m.appends.WithLabelValues("conflict")
	m.appendDup = m.appends.WithLabelValues("duplicate")
	m.appendFailed = m.appends.WithLabelValues("error")
	for _, c := range []prometheus.Collector{
		m.httpRequests, m.httpDuration, m.rateLimited, m.workspaceBusy, m.replays,
		m.appends, m.appendTime, m.appendRetries,
		m.cacheHits, m.cacheMisses, m.coldLoad, m.retries, m.gaveUp,
		m.batchSize, m.applyTime, m.parked,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(m.log.Handler(), slog.LevelWarn)})
}

// RateLimited implements api.Metrics.
func (m *Metrics) RateLimited() { m.rateLimited.Inc() }

// WorkspaceBusy implements api.Metrics.
func (m *Metrics) WorkspaceBusy() { m.workspaceBusy.Inc() }

// IdempotentReplay implements api.Metrics.
func (m *Metrics) IdempotentReplay() { m.replays.Inc() }

// Route implements api.Metrics.
func (m *Metrics) Route(method, pattern string) api.RouteMetrics {
	if method == "" {
		method, pattern = "other", "unmatched"
	}
	return &route{m: m, method: method, pattern: pattern}
}

// route resolves the children of one route per status code on first use.
type route struct {
	m               *Metrics
	method, pattern string
	codes           [500]atomic.Pointer[routeCode] // status 100–599
}

type routeCode struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

func (r *route) Observe(status int, elapsed time.Duration) {
	if status < 100 || status > 599 {
		status = 599
	}
	slot := &r.codes[status-100]
	c := slot.Load()
	if c == nil {
		code := strconv.Itoa(status)
		c = &routeCode{requests: r.m.httpRequests.WithLabelValues(r.method, r.pattern, code),
			duration: r.m.httpDuration.WithLabelValues(r.method, r.pattern, code)}
		slot.Store(c) // a race stores equal children: the vectors hand out one per label set
	}
	c.requests.Inc()
	c.duration.Observe(elapsed.Seconds())
}

// Log returns the recorder of the event log's appends.
func (m *Metrics) Log() natslog.Metrics { return logMetrics{m} }

type logMetrics struct{ m *Metrics }

func (l logMetrics) Appended(elapsed time.Duration, err error) {
	l.m.appendTime.Observe(elapsed.Seconds())
	switch {
	case err == nil:
		l.m.appendOK.Inc()
	case errors.Is(err, events.ErrConflict):
		l.m.appendConfl.Inc()
	case errors.Is(err, events.ErrAlreadyAppended):
		l.m.appendDup.Inc()
	default:
		l.m.appendFailed.Inc()
	}
}

func (l logMetrics) Retried() { l.m.appendRetries.Inc() }

// Store returns the recorder of the command store of one aggregate kind.
func (m *Metrics) Store(aggregate string) commands.StoreMetrics {
	return &storeMetrics{
		hits: m.cacheHits.WithLabelValues(aggregate), misses: m.cacheMisses.WithLabelValues(aggregate),
		load: m.coldLoad.WithLabelValues(aggregate), retries: m.retries.WithLabelValues(aggregate),
		gaveUp: m.gaveUp.WithLabelValues(aggregate),
	}
}

type storeMetrics struct {
	hits, misses, retries, gaveUp prometheus.Counter
	load                          prometheus.Observer
}

func (s *storeMetrics) CacheHit() { s.hits.Inc() }
func (s *storeMetrics) ColdLoad(elapsed time.Duration) {
	s.misses.Inc()
	s.load.Observe(elapsed.Seconds())
}
func (s *storeMetrics) Retry()  { s.retries.Inc() }
func (s *storeMetrics) GaveUp() { s.gaveUp.Inc() }

// Projector returns the recorder of one projector's runner.
func (m *Metrics) Projector(name string) projections.RunnerMetrics {
	return &runnerMetrics{size: m.batchSize.WithLabelValues(name), apply: m.applyTime.WithLabelValues(name),
		parked: m.parked.WithLabelValues(name)}
}

type runnerMetrics struct {
	size, apply prometheus.Observer
	parked      prometheus.Counter
}

func (r *runnerMetrics) Applied(size int, elapsed time.Duration) {
	r.size.Observe(float64(size))
	r.apply.Observe(elapsed.Seconds())
}
func (r *runnerMetrics) Parked(n int) { r.parked.Add(float64(n)) }

// StatusSource reports a projector's position and lag; a
// projections.Runner is one.
type StatusSource interface {
	Status(ctx context.Context) (projections.Status, error)
}

// WatchProjectors measures each projector's position, lag and state at
// every scrape (a few JetStream requests each, bounded by timeout).
func (m *Metrics) WatchProjectors(timeout time.Duration, sources ...StatusSource) error {
	return m.reg.Register(&projectorCollector{
		sources: sources, timeout: timeout, log: m.log,
		position: prometheus.NewDesc("astro_projector_position", "Last log sequence the projector applied.", []string{"projector"}, nil),
		logLast:  prometheus.NewDesc("astro_projector_log_last_sequence", "Last sequence of the event log, as the projector's lag was measured against.", []string{"projector"}, nil),
		lagEvents: prometheus.NewDesc("astro_projector_lag_events",
			"Events of the projector's subjects in the log and not applied yet.", []string{"projector"}, nil),
		lagSeconds: prometheus.NewDesc("astro_projector_lag_seconds",
			"Age of the oldest event not applied yet; 0 when caught up.", []string{"projector"}, nil),
		state: prometheus.NewDesc("astro_projector_state",
			"1 for the state the projector's runner is in here (starting, running, standby), 0 for the others.", []string{"projector", "state"}, nil),
		waiting: prometheus.NewDesc("astro_projector_reads_waiting",
			"Reads of this instance waiting for the projector to apply the writes they must show.", []string{"projector"}, nil),
		failures: prometheus.NewDesc("astro_projector_status_up",
			"1 when the projector's lag could be measured at this scrape, 0 when the log did not answer.", []string{"projector"}, nil),
	})
}

type projectorCollector struct {
	sources                                                            []StatusSource
	timeout                                                            time.Duration
	log                                                                *slog.Logger
	position, logLast, lagEvents, lagSeconds, state, waiting, failures *prometheus.Desc
}

func (c *projectorCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.position, c.logLast, c.lagEvents, c.lagSeconds, c.state, c.waiting, c.failures} {
		ch <- d
	}
}

func (c *projectorCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	for _, src := range c.sources {
		st, err := src.Status(ctx)
		name := st.Projector
		for _, s := range projections.States() {
			v := 0.0
			if s == st.State {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, v, name, string(s))
		}
		ch <- prometheus.MustNewConstMetric(c.position, prometheus.GaugeValue, float64(st.Position), name)
		ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(st.ReadsWaiting), name)
		if err != nil {
			c.log.Warn("projector status", "projector", name, "err", err)
			ch <- prometheus.MustNewConstMetric(c.failures, prometheus.GaugeValue, 0, name)
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.failures, prometheus.GaugeValue, 1, name)
		ch <- prometheus.MustNewConstMetric(c.logLast, prometheus.GaugeValue, float64(st.LogLast), name)
		ch <- prometheus.MustNewConstMetric(c.lagEvents, prometheus.GaugeValue, float64(st.LagEvents), name)
		ch <- prometheus.MustNewConstMetric(c.lagSeconds, prometheus.GaugeValue, st.LagSeconds, name)
	}
}
