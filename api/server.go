package api

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/julienschmidt/httprouter"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"astro/api/auth"
	"astro/api/idempotency"
	"astro/commands"
	"astro/commands/holidays"
	"astro/commands/notifications"
	"astro/events"
	"astro/query"
	"astro/query/history"
)

// Verifier checks a bearer token.
type Verifier interface {
	Verify(ctx context.Context, token string) (auth.Claims, error)
}

// Waiter reports when a read model has caught up with a log position.
type Waiter interface {
	WaitFor(ctx context.Context, seq uint64) error
}

// Config holds the server's dependencies and limits.
type Config struct {
	Verifier Verifier

	Notifications          *notifications.Handlers
	NotificationQueries    *query.Notifications
	NotificationsProjected Waiter
	// Inboxes and InboxLog feed the notification stream: the inbox's
	// state now, and its events from a position on.
	Inboxes  *notifications.Inboxes
	InboxLog InboxLog
	Streams  StreamConfig

	Holidays          *holidays.Handlers
	HolidayQueries    *query.Holidays
	HolidayHistory    *history.Holidays
	HolidaysProjected Waiter
	Resources         *query.Resources

	// Erasure erases a user's notifications or a workspace's data on
	// request.
	Erasure Erasure

	// Log tells reads which log position the read models must reflect.
	Log Positions
	// PositionKey seals the log positions clients are given
	// (PositionSeal); instances behind one address need the same key.
	// Without one, the server makes its own.
	PositionKey []byte

	// Ready reports whether the log, the database and the projectors are
	// up; /readyz answers 503 until it returns nil.
	Ready func(context.Context) error

	// Idempotency, when set, makes writes with an Idempotency-Key safe to
	// retry.
	Idempotency Idempotency

	// RateLimiter holds each caller (workspace and user) to its budget of
	// requests; nil turns limiting off. Give the NATS commands the same
	// one, so that a caller's requests over both draw on one budget.
	RateLimiter *RateLimiter
	Now         func() time.Time

	// RequestTimeout is every request's deadline; default 30s. Past it,
	// what is still running is cancelled and the answer is 503.
	RequestTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers; default 64 KiB.
	// The http.Server's own limit must be larger, so that what is over this
	// one gets the envelope rather than Go's plain-text 431.
	MaxHeaderBytes int
	// WorkspaceSlots is how many reads of one workspace run at once
	// (default 8, a quarter of the database pool); others wait up to 5 s,
	// then answer 429. Writes go to the log and are not counted.
	WorkspaceSlots int

	// Metrics, when set, records every request, rate-limit refusal and
	// idempotent replay.
	Metrics Metrics
	// MetricsHandler, when set, answers GET /metrics without a token (the
	// Prometheus exposition); unset when metrics are served elsewhere.
	MetricsHandler http.Handler
	// Tracer, when set, traces every request as a server span that
	// continues the caller's W3C traceparent; nil costs nothing.
	Tracer trace.Tracer

	MaxBodyBytes   int64         // default 256 KiB
	ReadYourWrites time.Duration // longest a read waits for its read model to catch up; default 5s
	Logger         *slog.Logger
}

// Server is the HTTP handler of the whole API.
type Server struct {
	cfg     Config
	log     *slog.Logger
	router  *router
	metrics Metrics
	other   RouteMetrics // requests no route matched
	recs    recorderPool
	slots   *slots
	creates *slots // one holiday create per workspace at a time: see createHoliday
	tokens  *tokenCache
	sends   SendAnswers
	methods methodTable
	streams *streams
	hub     *hub
	seal    *PositionSeal
	// maxWrite bounds a write under an Idempotency-Key: idempotency.MaxWrite,
	// shorter in tests.
	maxWrite time.Duration
}

// New builds the server and its routes.
func New(cfg Config) (*Server, error) {
	if cfg.Verifier == nil || cfg.Ready == nil ||
		cfg.Notifications == nil || cfg.NotificationQueries == nil || cfg.NotificationsProjected == nil ||
		cfg.Holidays == nil || cfg.HolidayQueries == nil || cfg.HolidayHistory == nil || cfg.HolidaysProjected == nil || cfg.Erasure == nil ||
		cfg.Resources == nil || cfg.Log == nil || cfg.Inboxes == nil || cfg.InboxLog == nil {
		return nil, errors.New("api: New needs a verifier, a readiness check, the log, the inboxes, and the handlers, queries and waiters of each domain")
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 30 * time.Second
	}
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = 64 << 10
	}
	if cfg.WorkspaceSlots <= 0 {
		cfg.WorkspaceSlots = 8
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 256 << 10
	}
	if cfg.ReadYourWrites <= 0 {
		cfg.ReadYourWrites = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Streams.defaults()
	methods, err := newMethodTable(OpenAPI)
	if err != nil {
		return nil, err
	}
	if cfg.PositionKey == nil {
		cfg.PositionKey = make([]byte, 32)
		_, _ = rand.Read(cfg.PositionKey)
	}
	seal, err := NewPositionSeal(cfg.PositionKey)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, tokens: newTokenCache(tokenCacheSize), slots: newSlots(cfg.WorkspaceSlots, 5*time.Second), creates: newSlots(1, 5*time.Second), methods: methods, metrics: cfg.Metrics,
		streams: newStreams(cfg.Streams.PerUser, cfg.Streams.Max), hub: newHub(cfg.InboxLog, cfg.Logger), seal: seal, maxWrite: idempotency.MaxWrite}
	if s.metrics == nil {
		s.metrics = noMetrics{}
	}
	s.other = s.metrics.Route("", "")
	s.sends = SendAnswers{Queries: cfg.NotificationQueries, Projected: cfg.NotificationsProjected, Wait: cfg.ReadYourWrites, Log: cfg.Logger}
	rt := httprouter.New()
	// Trailing slashes are tolerated in ServeHTTP instead of redirected:
	// a redirect is not an envelope, and some clients do not follow it.
	rt.RedirectTrailingSlash = false
	rt.RedirectFixedPath = false
	// 405 and OPTIONS are answered from the document's paths (methods.go),
	// before routing: the router's patterns are wider than the paths.
	rt.HandleMethodNotAllowed = false
	rt.HandleOPTIONS = false
	rt.NotFound = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, s.log, commands.Errorf(commands.ENotFound, "No such endpoint: %s.", r.URL.Path))
	})
	rt.PanicHandler = func(w http.ResponseWriter, r *http.Request, v any) {
		s.log.Error("panic", "value", v, "stack", string(debug.Stack()))
		writeError(w, r, s.log, fmt.Errorf("panic: %v", v))
	}
	s.router = &router{Router: rt, metrics: s.metrics, tracing: cfg.Tracer != nil}
	s.routes()
	return s, nil
}

func (s *Server) routes() {
	rt := s.router
	rt.GET("/healthz", func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
		writeOK(w, map[string]string{"status": "alive"})
	})
	rt.GET("/readyz", func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := s.cfg.Ready(ctx); err != nil {
			// A reason written for operators travels as an application
			// error; anything else stays in the log.
			msg := "Not ready."
			if e := (*commands.Error)(nil); errors.As(err, &e) && e.Message != "" {
				msg = "Not ready: " + e.Message
			}
			// Not ready is an answer, not a failure: probes ask every few
			// seconds while the service starts or catches up, and an error
			// line each time would bury the real ones.
			s.log.Debug("not ready", "err", err)
			writeError(w, r, nil, &commands.Error{Code: commands.EUnavailable, Message: msg, Err: err})
			return
		}
		writeOK(w, map[string]string{"status": "ready"})
	})
	rt.GET("/openapi.json", serveOpenAPI)
	if h := s.cfg.MetricsHandler; h != nil {
		// Scrapers carry no token; the numbers name no user or workspace.
		rt.GET("/metrics", func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) { h.ServeHTTP(w, r) })
	}
	s.notificationRoutes()
	s.holidayRoutes()
	s.erasureRoutes()
}

// spanMethod is r's method as a span names it: one HTTP defines, or
// _OTHER, as OpenTelemetry's HTTP conventions say.
func spanMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "_OTHER"
}

// clipPath is path cut to 256 bytes, at a character's start.
func clipPath(path string) string {
	const limit = 256
	if len(path) <= limit {
		return path
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(path[cut]) {
		cut--
	}
	return path[:cut]
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Metrics == nil && s.cfg.Tracer == nil {
		s.serve(w, r)
		return
	}
	start := time.Now()
	var span trace.Span
	if s.cfg.Tracer != nil {
		ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		// The span lives until exported, and is made before any check: what
		// the caller wrote goes in bounded.
		method := spanMethod(r.Method)
		ctx, span = s.cfg.Tracer.Start(ctx, method, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", method), attribute.String("url.path", clipPath(r.URL.Path))))
		r = r.WithContext(ctx)
	}
	rec := s.recs.get(w, s.other)
	s.serve(rec, r)
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	rec.route.Observe(status, time.Since(start))
	s.recs.put(rec)
	if span != nil {
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
		span.End()
	}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	reqID := r.Header.Get("X-Request-Id")
	if !events.ValidToken(reqID) {
		reqID = events.NewID(time.Now())
	}
	w.Header().Set("X-Request-Id", reqID)
	r.Header.Set("X-Request-Id", reqID) // the correlation id of the events it causes
	if headerBytes(r) > s.cfg.MaxHeaderBytes {
		writeError(w, r, s.log, commands.Errorf(commands.EHeaderTooLarge, "The URL and headers are too large: at most %d bytes.", s.cfg.MaxHeaderBytes))
		return
	}
	mergeSlashes(r.URL)
	if p := r.URL.Path; len(p) > 1 && strings.HasSuffix(p, "/") {
		r.URL.Path = strings.TrimRight(p, "/")
		if r.URL.Path == "" {
			r.URL.Path = "/" // "/%2F": the root, not an empty path
		}
	}
	r.URL.Path = normalIDs(r.URL.Path)
	r.URL.RawQuery = flatQuery(r.URL.RawQuery)
	if allow := s.methods.allowed(r.URL.Path); allow != nil && !slices.Contains(allow, r.Method) {
		// A known path: OPTIONS answers what Allow lists, any other method
		// it does not have is 405, whatever route its pattern would reach.
		w.Header().Set("Allow", strings.Join(append(allow, http.MethodOptions), ", "))
		if r.Method == http.MethodOptions {
			writeOK(w, nil)
			return
		}
		writeError(w, r, s.log, commands.Errorf(commands.EMethod, "%s is not allowed on %s; it takes %s.", r.Method, r.URL.Path, strings.Join(allow, ", ")))
		return
	}
	if err := queryError(r.URL.RawQuery); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if err := headerError(r.Header); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if r.Method == http.MethodHead {
		r = headAsGet(r)
	}
	if r.URL.Path != StreamPath || r.Method != http.MethodGet {
		// A stream lives past any request deadline; it ends on its own
		// terms (the token's expiry, a shutdown, the client leaving).
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
		defer cancel()
		r = r.WithContext(ctx)
	}
	s.router.ServeHTTP(w, r)
}

// headKey marks the context of a HEAD request served as GET.
type headKey struct{}

// headAsGet is r, a HEAD request, as the GET its handlers serve: RFC 9110
// (9.3.2) makes HEAD a GET without content, with the same status and
// headers. A copy: net/http reads the method of the request it was given
// to discard the body, so that one stays HEAD. The mark is for what must
// stop once the headers are out (the notification stream).
func headAsGet(r *http.Request) *http.Request {
	g := r.WithContext(context.WithValue(r.Context(), headKey{}, true))
	g.Method = http.MethodGet
	return g
}

// isHead reports whether r is a HEAD request served as GET.
func isHead(r *http.Request) bool {
	head, _ := r.Context().Value(headKey{}).(bool)
	return head
}

// handler is an authenticated endpoint: it returns an error instead of
// writing one.
type handler func(w http.ResponseWriter, r *http.Request, p httprouter.Params, c commands.Caller) error

// authed authenticates the request and runs h with the caller.
func (s *Server) authed(h handler) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
		c, err := s.caller(r)
		if err == nil {
			err = s.rateLimit(w, c.WorkspaceID, c.UserID)
		}
		if err == nil {
			r, err = s.withMinPosition(r, c)
		}
		if err == nil && r.Method == http.MethodGet {
			// Reads hold the read models' pool; writes append to the log,
			// which this guard does not need to share out.
			release, ok := s.slots.acquire(r.Context(), c.WorkspaceID)
			if !ok {
				s.metrics.WorkspaceBusy()
				w.Header().Set("Retry-After", "1")
				err = commands.Errorf(commands.ETooManyRequests, "Too many requests of this workspace at once; retry after 1 s.")
			} else {
				defer release()
			}
		}
		if err == nil {
			// A header sent empty is a key, and refused as one: a client
			// whose key came out empty would else lose its retries' safety
			// in silence.
			if HeaderSent(r.Header, "Idempotency-Key") && r.Method != http.MethodGet && s.cfg.Idempotency != nil {
				err = s.idempotent(w, r, p, c, h, r.Header.Get("Idempotency-Key"))
			} else {
				err = h(w, r, p, c)
			}
		}
		if err != nil {
			writeError(w, r, s.log, err)
		}
	}
}

func (s *Server) caller(r *http.Request) (commands.Caller, error) {
	claims, err := s.bearerClaims(r)
	if err != nil {
		return commands.Caller{}, err
	}
	return commands.Caller{
		UserID:        claims.UserID,
		WorkspaceID:   claims.WorkspaceID,
		Scopes:        claims.Scopes,
		Integration:   IntegrationName(r.Header.Get("x-integration-name")),
		CorrelationID: r.Header.Get("X-Request-Id"),
	}, nil
}

// decode reads a JSON body into dst. Unknown fields are ignored: clients may
// be newer than the server.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, dst any) error {
	if err := checkBodyHeaders(w, r); err != nil {
		return err
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	return decodeObject(body, dst)
}

// checkBodyHeaders refuses a body that is not JSON, or coded, with 415.
func checkBodyHeaders(w http.ResponseWriter, r *http.Request) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		// text/json is JSON too: .NET's formatters send and take it.
		if err != nil || !(mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")) {
			return commands.Errorf(commands.EMediaType, "The body must be JSON (Content-Type: application/json).")
		}
	}
	// A coded body (gzip, br) is not taken: read as JSON it was "not a JSON
	// object", a 400 that hid what to change. RFC 9110 (15.5.16) makes it
	// 415, with the codings taken in Accept-Encoding.
	for _, ce := range r.Header.Values("Content-Encoding") {
		for coding := range strings.SplitSeq(ce, ",") {
			if coding = strings.TrimSpace(coding); coding != "" && !strings.EqualFold(coding, "identity") {
				w.Header().Set("Accept-Encoding", "identity")
				return commands.Errorf(commands.EMediaType, "The body's Content-Encoding %q is not supported; send the JSON unencoded.", clipPath(coding))
			}
		}
	}
	return nil
}

// mergeSlashes merges each run of u's slashes into one: a client joins its
// base URL and the path, and a base ending in "/" makes "//api/...".
// Proxies do the same. An encoded slash (%2F) is a character of its
// segment, never merged.
func mergeSlashes(u *url.URL) {
	p := u.EscapedPath()
	if !strings.Contains(p, "//") {
		return
	}
	for strings.Contains(p, "//") {
		p = strings.ReplaceAll(p, "//", "/")
	}
	if merged, err := url.Parse(p); err == nil { // an escaped path parses
		u.Path, u.RawPath = merged.Path, merged.RawPath
	}
}

// errBodyTimeout marks a body whose read the server's ReadTimeout ended.
// net/http cancels the request's context on any read error, as when the
// client goes away; this client is waiting for its answer.
var errBodyTimeout = errors.New("the body was still coming at the deadline")

// readBody reads the whole body, up to the limit.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, commands.Errorf(commands.ETooLarge, "The body is too large: at most %d bytes.", s.cfg.MaxBodyBytes)
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		// The server's ReadTimeout is the request's deadline: a body still
		// coming when it passes is a request out of time, which the client
		// may retry, not a bad one.
		return nil, &commands.Error{Code: commands.EUnavailable, Message: "The request took longer than its deadline; try again.", Err: fmt.Errorf("%w: %w", errBodyTimeout, err)}
	}
	if err != nil {
		return nil, commands.Errorf(commands.EInvalid, "The body could not be read.")
	}
	return body, nil
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "slice", "array":
		return "list"
	case "map", "struct":
		return "object"
	default:
		return "number"
	}
}
