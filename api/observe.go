package api

import (
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/julienschmidt/httprouter"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Metrics is what the HTTP layer reports. The server resolves a
// RouteMetrics per route once, at start, so that a request costs no label
// lookup.
type Metrics interface {
	// Route is the recorder of requests to one route pattern; method and
	// pattern "" stand for requests no route matched.
	Route(method, pattern string) RouteMetrics
	// RateLimited counts a request refused by the per-caller rate limit.
	RateLimited()
	// WorkspaceBusy counts a read refused because its workspace had every
	// read slot taken.
	WorkspaceBusy()
	// IdempotentReplay counts a write answered from its Idempotency-Key's
	// stored answer.
	IdempotentReplay()
}

// RouteMetrics records the requests of one route.
type RouteMetrics interface {
	Observe(status int, elapsed time.Duration)
}

// noMetrics reports nothing: a server without metrics.
type noMetrics struct{}

func (noMetrics) Route(string, string) RouteMetrics { return noMetrics{} }
func (noMetrics) RateLimited()                      {}
func (noMetrics) WorkspaceBusy()                    {}
func (noMetrics) IdempotentReplay()                 {}
func (noMetrics) Observe(int, time.Duration)        {}

// router registers routes with the recorder of each, so that a request
// is counted under its route pattern, not its path (which holds ids).
type router struct {
	*httprouter.Router
	metrics Metrics
	tracing bool
}

func (rt *router) GET(path string, h httprouter.Handle)    { rt.handle(http.MethodGet, path, h) }
func (rt *router) POST(path string, h httprouter.Handle)   { rt.handle(http.MethodPost, path, h) }
func (rt *router) PUT(path string, h httprouter.Handle)    { rt.handle(http.MethodPut, path, h) }
func (rt *router) DELETE(path string, h httprouter.Handle) { rt.handle(http.MethodDelete, path, h) }

func (rt *router) handle(method, path string, h httprouter.Handle) {
	o := rt.observed(method, path)
	rt.Router.Handle(method, path, func(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
		o.start(w, r)
		h(w, r, p)
	})
}

// named registers a route whose parameter param is, for some requests, a
// fixed name (/notifications/:name is /unreadcount, /count and /stream):
// those are counted and traced under the path they name, not all under
// the pattern, so that a stream's lifetime is not an unread count's
// latency.
func (rt *router) named(method, path, param string, names []string, h httprouter.Handle) {
	o := rt.observed(method, path)
	byName := make(map[string]observed, len(names))
	for _, n := range names {
		byName[n] = rt.observed(method, strings.Replace(path, ":"+param, n, 1))
	}
	rt.Router.Handle(method, path, func(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
		if n, ok := byName[p.ByName(param)]; ok {
			n.start(w, r)
		} else {
			o.start(w, r)
		}
		h(w, r, p)
	})
}

// observed is what a request of one route is counted and traced under,
// resolved once, at start.
type observed struct {
	metrics RouteMetrics
	name    string
	route   attribute.KeyValue
	tracing bool
}

func (rt *router) observed(method, path string) observed {
	return observed{metrics: rt.metrics.Route(method, path), name: method + " " + path,
		route: attribute.String("http.route", path), tracing: rt.tracing}
}

func (o observed) start(w http.ResponseWriter, r *http.Request) {
	if rec, ok := w.(*statusRecorder); ok {
		rec.route = o.metrics
	}
	if o.tracing {
		span := trace.SpanFromContext(r.Context())
		span.SetName(o.name)
		span.SetAttributes(o.route)
	}
}

// statusRecorder notes a response's status for the request's metrics. Recorders
// are pooled: the metrics cost a request no allocation.
type statusRecorder struct {
	http.ResponseWriter
	status int
	route  RouteMetrics
}

var _ interface{ Unwrap() http.ResponseWriter } = (*statusRecorder)(nil)

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

type recorderPool struct{ sync.Pool }

func (p *recorderPool) get(w http.ResponseWriter, route RouteMetrics) *statusRecorder {
	rec, _ := p.Get().(*statusRecorder)
	if rec == nil {
		rec = &statusRecorder{}
	}
	rec.ResponseWriter, rec.status, rec.route = w, 0, route
	return rec
}

func (p *recorderPool) put(rec *statusRecorder) {
	rec.ResponseWriter, rec.route = nil, nil
	p.Put(rec)
}
