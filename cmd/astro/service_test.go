package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/nats-io/nats.go"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	liberrors "github.com/pb33f/libopenapi-validator/errors"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"astro/api"
	"astro/api/auth"
	"astro/events"
	"astro/events/natslog"
	"astro/events/natsserver"
	"astro/events/natstest"
	"astro/projections/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

const testSecret = "test-secret-test-secret-test-secret-0123456789"

// testTicketKey signs the test services' stream tickets and seals their
// positions, the same on every instance of a test (openPosition).
const testTicketKey = "test-ticket-key-test-ticket-key-0123456789"

// service is one Astro started as serve starts it, with its configuration
// read as run reads it, on an embedded NATS and a fresh database of the
// shared test PostgreSQL.
type service struct {
	t       testing.TB
	natsDir string // the log's files, when the test started its NATS
	base    string
	env     map[string]string
	client  *http.Client // every test request goes through it
	stop    func()       // stops this instance; Cleanup calls it too
	// metricsBase is the base URL of /metrics when ASTRO_METRICS_ADDR
	// serves them apart; "" otherwise.
	metricsBase string
	// debugBase is the base URL of Go's profiles when ASTRO_DEBUG_ADDR
	// serves them.
	debugBase string
}

type serviceOption func(env map[string]string)

func startService(t testing.TB, opts ...serviceOption) *service {
	t.Helper()
	env, natsDir := serviceEnv(t, opts...)
	s := startWithEnv(t, env)
	s.natsDir = natsDir
	return s
}

// serviceEnv is the environment startService starts the service in, with
// its own NATS (whose files are in natsDir) and database.
func serviceEnv(t testing.TB, opts ...serviceOption) (env map[string]string, natsDir string) {
	t.Helper()
	// NATS runs beside the service, not inside it, so that tests can read
	// the log and restart the service on the same log and database.
	natsDir = t.TempDir()
	ns, err := natsserver.Start(context.Background(), natsserver.Config{StoreDir: natsDir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	env = map[string]string{
		"ASTRO_HTTP_ADDR":         "127.0.0.1:0",
		"ASTRO_DATA_DIR":          t.TempDir(),
		"ASTRO_NATS_URL":          ns.ClientURL(),
		"ASTRO_DATABASE_URL":      pgtest.URL(t),
		"ASTRO_JWT_SECRET":        testSecret,
		"ASTRO_STREAM_TICKET_KEY": testTicketKey,
		"ASTRO_RATE_LIMIT":        "off", // tests that need it turn it on
		"ASTRO_LOG_LEVEL":         "warn",
	}
	for _, o := range opts {
		o(env)
	}
	return env, natsDir
}

func startWithEnv(t testing.TB, env map[string]string) *service {
	t.Helper()
	return startWithConfig(t, env, nil)
}

// startWithConfig starts the service on the configuration env makes,
// changed by adjust when it is not nil (for what no variable sets, such as
// a tracer provider).
func startWithConfig(t testing.TB, env map[string]string, adjust func(*Config)) *service {
	t.Helper()
	var stderr syncBuffer
	cfg, err := parseConfig(nil, func(k string) string { return env[k] }, &stderr)
	if err != nil {
		t.Fatalf("astro config: %v\n%s", err, stderr.String())
	}
	if adjust != nil {
		adjust(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	// ctx outlives the start (Run gets it too), so the deadline cancels it
	// rather than bounding it.
	late := time.AfterFunc(60*time.Second, cancel)
	inst, err := start(ctx, cfg, newLogger(cfg, &stderr))
	if !late.Stop() {
		if err == nil {
			inst.Close()
		}
		t.Fatalf("astro did not start in time: %v\n%s", err, stderr.String())
	}
	if err != nil {
		cancel()
		t.Fatalf("astro did not start: %v\n%s", err, stderr.String())
	}
	done := make(chan error, 1)
	go func() { done <- inst.Run(ctx) }()
	// Registered before stop, so it runs after the service stopped (every
	// append is done) and before startService's NATS shuts down.
	t.Cleanup(func() { checkEventContract(t, env["ASTRO_NATS_URL"]) })
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			// Not closed when it did not stop: its parts still run on what
			// Close would take from under them.
			if stopped(t, done, &stderr) {
				inst.Close()
			}
		})
	}
	t.Cleanup(stop)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(stderr.String())
		}
	})
	c, err := loadContract()
	if err != nil {
		t.Fatalf("api/openapi.json: %v", err)
	}
	client := &http.Client{Timeout: time.Minute, Transport: &contractTransport{t: t, c: c, next: http.DefaultTransport}}
	s := &service{t: t, base: inst.Addr(), env: env, client: client, stop: stop, metricsBase: inst.MetricsAddr(), debugBase: inst.DebugAddr()}
	s.waitReady()
	return s
}

// TestServeAnnouncesAddresses runs the service as main does: scripts (the
// fault suite) and people learn where it listens from these two lines.
func TestServeAnnouncesAddresses(t *testing.T) {
	env, _ := serviceEnv(t, func(env map[string]string) { env["ASTRO_METRICS_ADDR"] = "127.0.0.1:0" })
	m := runAsMain(t, env)
	m.waitListening()
	base, metricsURL := m.announced("astro: listening on "), m.announced("astro: metrics on ")
	if !strings.HasPrefix(base, "http://127.0.0.1:") || !strings.HasPrefix(metricsURL, "http://127.0.0.1:") || !strings.HasSuffix(metricsURL, "/metrics") {
		t.Fatalf("announced API %q and metrics %q, want http://127.0.0.1:PORT and http://127.0.0.1:PORT/metrics", base, metricsURL)
	}
	for _, url := range []string{base + "/healthz", metricsURL} {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s: %d, want 200", url, resp.StatusCode)
		}
	}
	m.cancel()
	stopped(t, m.done, &m.stderr)
	quiet(t, m)
}

// TestCleanStopOnEmbeddedNATSWarnsOfNothing: the default run, on its
// embedded NATS server, stops without a warning. It logged "NATS
// disconnected" every time: the server shut down under a connection still
// draining.
func TestCleanStopOnEmbeddedNATSWarnsOfNothing(t *testing.T) {
	env := map[string]string{
		"ASTRO_HTTP_ADDR": "127.0.0.1:0", "ASTRO_DATA_DIR": t.TempDir(), "ASTRO_NATS_LISTEN": "off",
		"ASTRO_DATABASE_URL": pgtest.URL(t), "ASTRO_JWT_SECRET": testSecret, "ASTRO_LOG_LEVEL": "warn",
	}
	m := runAsMain(t, env)
	m.waitListening()
	m.cancel()
	stopped(t, m.done, &m.stderr)
	quiet(t, m)
}

// quiet fails the test when a clean start and stop logged a warning: an
// operator's log shows a warning for something to look at.
func quiet(t *testing.T, m *mainRun) {
	t.Helper()
	if log := m.stderr.String(); strings.Contains(log, "level=WARN") || strings.Contains(log, "level=ERROR") {
		t.Errorf("a clean start and stop logged warnings:\n%s", log)
	}
}

// mainRun is the service run as main runs it (run, in this process), for
// tests of what only main's caller sees: its output and its return.
type mainRun struct {
	t              *testing.T
	cancel         context.CancelFunc
	done           chan error
	stdout, stderr syncBuffer
}

// runAsMain runs the service on env until the test ends or cancel.
func runAsMain(t *testing.T, env map[string]string) *mainRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	m := &mainRun{t: t, cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- run(ctx, nil, func(k string) string { return env[k] }, &m.stdout, &m.stderr) }()
	return m
}

// running fails the test when the service has returned.
func (m *mainRun) running() {
	m.t.Helper()
	select {
	case err := <-m.done:
		m.t.Fatalf("astro exited: %v\n%s", err, m.stderr.String())
	default:
	}
}

// waitListening waits until the service has said where it listens.
func (m *mainRun) waitListening() {
	m.t.Helper()
	waitFor(m.t, 60*time.Second, func() error {
		m.running()
		if m.announced("astro: listening on ") == "" {
			return fmt.Errorf("no listening address announced:\n%s", m.stdout.String())
		}
		return nil
	})
}

// announced is what the service printed after prefix on a line of its
// standard output, "" before it did.
func (m *mainRun) announced(prefix string) string {
	for line := range strings.Lines(m.stdout.String()) {
		if a, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), prefix); ok {
			return a
		}
	}
	return ""
}

// stopped waits for a service whose context was cancelled to return from
// its run, and reports whether it did in time and without an error.
func stopped(t testing.TB, done <-chan error, stderr *syncBuffer) bool {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("astro stopped with %v\n%s", err, stderr.String())
		}
		return true
	case <-time.After(30 * time.Second):
		t.Errorf("astro did not stop in time")
		return false
	}
}

// beginStop starts stopping the service and returns once it no longer
// answers ready, with a channel closed when the stop is done: what a test
// of the shutdown's grace runs against.
func (s *service) beginStop() <-chan struct{} {
	s.t.Helper()
	stopped := make(chan struct{})
	go func() { s.stop(); close(stopped) }()
	waitFor(s.t, 10*time.Second, func() error {
		if resp, err := s.client.Get(s.base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return errors.New("the service still answers ready")
			}
		}
		return nil
	})
	return stopped
}

func (s *service) waitReady() {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := s.client.Get(s.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("not ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // polling a readiness probe, bounded by the deadline
	}
}

// connectNATS connects to the service's NATS server with its full rights,
// as the service itself does; closed when the test ends.
func (s *service) connectNATS() *nats.Conn {
	s.t.Helper()
	nc, err := nats.Connect(s.env["ASTRO_NATS_URL"])
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(nc.Close)
	return nc
}

// token signs a token for user in workspace with scopes.
func token(t testing.TB, user, ws string, scopes ...string) string {
	t.Helper()
	tok, err := auth.Sign([]byte(testSecret), auth.Claims{UserID: user, WorkspaceID: ws, Scopes: scopes}, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// envelope is a decoded response, with data left raw.
type envelope struct {
	Status     int
	Header     http.Header
	Success    bool            `json:"success"`
	HasError   bool            `json:"hasError"`
	StatusCode string          `json:"statusCode"`
	Data       json.RawMessage `json:"data"`
	Error      *struct {
		Message          string              `json:"message"`
		TechnicalError   string              `json:"technicalError"`
		ValidationErrors map[string][]string `json:"validationErrors"`
	} `json:"error"`
	raw []byte
}

// call sends a request; body is JSON-encoded unless it is a string (sent
// raw). headers are pairs of name and value.
func (s *service) call(method, path, tok string, body any, headers ...string) envelope {
	s.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			s.t.Fatal(err)
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, s.base+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	env := envelope{Status: resp.StatusCode, Header: resp.Header, raw: raw}
	if err := json.Unmarshal(raw, &env); err != nil {
		s.t.Fatalf("%s %s: %d, body is not an envelope: %v\n%s", method, path, resp.StatusCode, err, raw)
	}
	checkEnvelope(s.t, method+" "+path, env)
	return env
}

// checkEnvelope holds every response to the envelope rules of spec 2.1–2.3.
func checkEnvelope(t testing.TB, what string, env envelope) {
	t.Helper()
	want := http.StatusText(env.Status)
	if env.StatusCode == "" || want == "" {
		t.Errorf("%s: statusCode %q for HTTP %d", what, env.StatusCode, env.Status)
	}
	ok := env.Status < 400
	if env.Success != ok || env.HasError == ok {
		t.Errorf("%s: HTTP %d with success=%v hasError=%v", what, env.Status, env.Success, env.HasError)
	}
	if !ok && (env.Error == nil || env.Error.Message == "") {
		t.Errorf("%s: HTTP %d without error.message: %s", what, env.Status, env.raw)
	}
	if !ok && env.Status >= 500 {
		t.Errorf("%s: server error %d: %s", what, env.Status, env.raw)
	}
	for _, leak := range []string{"pq:", "sql", "panic", "goroutine", ".go:", "nats:"} {
		if env.Error != nil && strings.Contains(strings.ToLower(env.Error.TechnicalError+env.Error.Message), leak) {
			t.Errorf("%s: error leaks internals (%q): %s", what, leak, env.raw)
		}
	}
}

func (e envelope) decode(t testing.TB, dst any) {
	t.Helper()
	if err := json.Unmarshal(e.Data, dst); err != nil {
		t.Fatalf("decode data %s: %v", e.Data, err)
	}
}

func (e envelope) want(t testing.TB, status int) envelope {
	t.Helper()
	if e.Status != status {
		t.Fatalf("HTTP %d, want %d: %s", e.Status, status, e.raw)
	}
	return e
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// signWith signs an HS256 token valid from nbf for ttl.
func signWith(secret, user, ws string, nbf time.Time, ttl time.Duration) (string, error) {
	return jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": user, "workspace_id": ws, "nbf": nbf.Unix(), "iat": nbf.Unix(), "exp": nbf.Add(ttl).Unix(),
	}).SignedString([]byte(secret))
}

// logEvents reads every event of the given types from the log.
func (s *service) logEvents(t testing.TB, types ...string) []events.Event {
	t.Helper()
	all, err := natstest.ReadLog(t.Context(), s.connectNATS())
	if err != nil {
		t.Fatal(err)
	}
	var out []events.Event
	for _, e := range all {
		if len(types) == 0 || slices.Contains(types, e.Type) {
			out = append(out, e)
		}
	}
	return out
}

// waitCompacted waits until user's inbox (workspace w1) has been compacted:
// its log begins with the compaction. A service with a short
// ASTRO_ERASE_WITHIN compacts within a second or two. It asks the subject
// itself (a direct get), as the compactor does: one message, where a scan
// of the whole stream (logEvents) reads every event of every inbox.
func (s *service) waitCompacted(user string) {
	s.t.Helper()
	l, err := natslog.Open(s.t.Context(), s.connectNATS(), natslog.Config{Bind: true, EventsOnly: true})
	if err != nil {
		s.t.Fatal(err)
	}
	inbox := events.Subject("w1", events.Aggregate{Kind: events.KindInbox, ID: user})
	waitFor(s.t, 30*time.Second, func() error {
		if _, typ, err := l.First(s.t.Context(), inbox); err != nil || typ != (events.InboxCompacted{}).EventType() {
			return fmt.Errorf("%s's log begins with %q (%v), not yet compacted", user, typ, err)
		}
		return nil
	})
}

// logMessage is one message of an event stream as stored: what a
// downstream consumer receives.
type logMessage = natslog.Message

// logMessages reads every message of the event streams, raw.
func (s *service) logMessages(t testing.TB) []logMessage {
	t.Helper()
	msgs, err := readLog(s.env["ASTRO_NATS_URL"])
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// readLog reads both event streams from the NATS server at url, the
// history's messages then the inboxes'. It returns errors rather than
// failing a test, so that cleanups can use it.
func readLog(url string) ([]logMessage, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := natslog.Open(ctx, nc, natslog.Config{Bind: true, EventsOnly: true})
	if err != nil {
		return nil, err
	}
	var out []logMessage
	err = l.Tail(ctx, events.SubjectPrefix+".>", events.ScanFrom{}, false, func(m natslog.Message) error {
		out = append(out, m)
		return nil
	})
	return out, err
}

// contract checks HTTP exchanges against api.OpenAPI and events against
// their JSON Schemas. Requests are checked leniently, as the server reads
// them (unknown fields are ignored); responses strictly, so a field or
// header the document does not declare fails as much as a missing one.
type contract struct {
	mu        sync.Mutex // the validators' caches are not documented as safe for concurrent use
	requests  validator.Validator
	responses validator.Validator
	document  validator.Validator // the responses of GET /openapi.json, not strict
	public    validator.Validator // the answers to the public API document's operations
	// outside holds, by status, the schema of the answers to requests that
	// no operation of the document takes: unknown paths and methods.
	outside map[int]*jsonschema.Schema
	// properties is every property name the document declares.
	properties []string
}

// loadContract builds the contract once per test binary: parsing and
// compiling the document takes a quarter of a second, and it is read-only
// once built.
var loadContract = sync.OnceValues(newContract)

func newContract() (*contract, error) {
	build := func(opts ...config.Option) (validator.Validator, error) {
		doc, err := libopenapi.NewDocument(api.OpenAPI)
		if err != nil {
			return nil, err
		}
		if v := doc.GetVersion(); !strings.HasPrefix(v, "3.1.") {
			return nil, fmt.Errorf("openapi %q, want 3.1.x", v)
		}
		v, errs := validator.NewValidator(doc, opts...)
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		if ok, verrs := v.ValidateDocument(); !ok {
			return nil, fmt.Errorf("not a valid OpenAPI 3.1 document: %s", describeValidation(verrs))
		}
		return v, nil
	}
	reqs, err := build(config.WithFormatAssertions())
	if err != nil {
		return nil, err
	}
	// Strict mode reports any property a schema does not name, so the
	// free-form per-field messages are exempt (keys holding a dot, such as
	// data.taskId, are written in brackets); so is the document itself,
	// which TestOpenAPIServed compares byte for byte.
	resps, err := build(config.WithFormatAssertions(), config.WithStrictMode(), config.WithStrictIgnorePaths(
		"$.body.error.validationErrors**",
	))
	if err != nil {
		return nil, err
	}
	doc, err := build(config.WithFormatAssertions())
	if err != nil {
		return nil, err
	}
	raw, err := jsonschema.UnmarshalJSON(bytes.NewReader(api.OpenAPI))
	if err != nil {
		return nil, err
	}
	comp := jsonschema.NewCompiler()
	comp.DefaultDraft(jsonschema.Draft2020)
	comp.AssertFormat()
	const docURL = "urn:astro:openapi"
	if err := comp.AddResource(docURL, raw); err != nil {
		return nil, err
	}
	public, err := newPublicContract()
	if err != nil {
		return nil, err
	}
	c := &contract{requests: reqs, responses: resps, document: doc, public: public, outside: map[int]*jsonschema.Schema{}, properties: propertyNames(raw)}
	for status, name := range map[int]string{400: "BadRequest", 401: "Unauthorized", 404: "NotFoundRoute", 405: "MethodNotAllowed", 429: "TooManyRequests"} {
		sch, err := comp.Compile(docURL + "#/components/responses/" + name + "/content/application~1json/schema")
		if err != nil {
			return nil, fmt.Errorf("response %s: %w", name, err)
		}
		c.outside[status] = sch
	}
	return c, nil
}

// propertyNames lists the names under every "properties" of the document.
func propertyNames(doc any) []string {
	var names []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if props, ok := v["properties"].(map[string]any); ok {
				for name := range props {
					names = append(names, name)
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	slices.Sort(names)
	return slices.Compact(names)
}

// asServerReads is a JSON body's keys as the server reads them: it
// matches names without regard to case (encoding/json, as ASP.NET Core
// does), so a key that differs from a declared property only in case is
// that property, and of keys naming the same one the last wins. A body
// that is not JSON is left as it is.
func (c *contract) asServerReads(body []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	out, err := c.readValue(dec)
	if err != nil || dec.More() {
		return body
	}
	return out
}

// readValue writes the next value of dec again, its objects' keys read as
// the server reads them.
func (c *contract) readValue(dec *json.Decoder) ([]byte, error) {
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	switch t {
	case json.Delim('{'):
		var keys []string
		values := map[string][]byte{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			key := c.property(k.(string))
			v, err := c.readValue(dec)
			if err != nil {
				return nil, err
			}
			if _, seen := values[key]; !seen {
				keys = append(keys, key)
			}
			values[key] = v
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			name, _ := json.Marshal(k)
			b.Write(name)
			b.WriteByte(':')
			b.Write(values[k])
		}
		b.WriteByte('}')
	case json.Delim('['):
		b.WriteByte('[')
		for i := 0; dec.More(); i++ {
			v, err := c.readValue(dec)
			if err != nil {
				return nil, err
			}
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(v)
		}
		b.WriteByte(']')
	default:
		return json.Marshal(t)
	}
	_, err = dec.Token() // the closing delimiter
	return b.Bytes(), err
}

// property is the declared property that key names but for case (folded
// as encoding/json folds, strings.EqualFold), or key if none.
func (c *contract) property(key string) string {
	if _, ok := slices.BinarySearch(c.properties, key); ok {
		return key
	}
	for _, name := range c.properties {
		if strings.EqualFold(key, name) {
			return name
		}
	}
	return key
}

// check returns what in one exchange breaks the contract. Every response
// is checked. A request is checked only when it succeeded and was not a
// replay: tests send malformed requests on purpose, and the answer to
// those (a documented 4xx) is what the contract promises about them.
func (c *contract) check(req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) []string {
	// The request as the server reads it: slashes merged, routed on the
	// decoded path (an escaped slash separates segments), a trailing slash
	// tolerated, empty
	// query parameters ignored, and a body without a Content-Type, or with
	// any +json type, read as JSON.
	rq := req.Clone(req.Context())
	// Runs of slashes merged in the escaped path, as the server merges
	// them (a base URL ending in "/" joined to a path), before decoding.
	if p := rq.URL.EscapedPath(); strings.Contains(p, "//") {
		for strings.Contains(p, "//") {
			p = strings.ReplaceAll(p, "//", "/")
		}
		if u, err := url.Parse(p); err == nil {
			rq.URL.Path, rq.URL.RawPath = u.Path, u.RawPath
		}
	}
	rq.URL.RawPath, rq.URL.Fragment, rq.URL.RawFragment = "", "", "" // a fragment is never sent
	if p := rq.URL.Path; len(p) > 1 && strings.HasSuffix(p, "/") {
		rq.URL.Path = strings.TrimRight(p, "/")
	}
	q := rq.URL.Query()
	for k, vs := range q {
		if strings.HasPrefix(k, "$") { // the OData options are trimmed
			for i := range vs {
				vs[i] = strings.TrimSpace(vs[i])
			}
		}
		if slices.Contains(vs, "") {
			q.Del(k) // an empty parameter is an absent one
		}
	}
	rq.URL.RawQuery = q.Encode()
	if mt, _, _ := mime.ParseMediaType(rq.Header.Get("Content-Type")); len(reqBody) > 0 && (mt == "" || strings.HasSuffix(mt, "+json")) {
		rq.Header.Set("Content-Type", "application/json")
	}
	reqBody = c.asServerReads(reqBody)
	rq.Body = io.NopCloser(bytes.NewReader(reqBody))
	rs := *resp
	rs.Body = io.NopCloser(bytes.NewReader(respBody))
	rs.Request = rq

	c.mu.Lock()
	defer c.mu.Unlock()
	var problems []string
	responses := c.responses
	if rq.URL.Path == "/openapi.json" {
		responses = c.document
	}
	if ok, errs := responses.ValidateHttpResponse(rq, &rs); !ok {
		for _, e := range errs {
			if e.IsPathMissingError() || e.IsOperationMissingError() {
				return c.checkOutside(resp.StatusCode, respBody)
			}
		}
		problems = append(problems, "response: "+describeValidation(errs))
	}
	rs.Body = io.NopCloser(bytes.NewReader(respBody))
	problems = append(problems, c.checkPublic(rq, &rs)...)
	// A replay is the answer to the first request with its Idempotency-Key,
	// checked when that one was sent; the retry itself is not executed.
	replay := resp.Header.Get("Idempotent-Replayed") == "true"
	if resp.StatusCode >= 200 && resp.StatusCode < 300 && !replay {
		rq.Body = io.NopCloser(bytes.NewReader(reqBody))
		if ok, errs := c.requests.ValidateHttpRequestSync(rq); !ok {
			problems = append(problems, "request: "+describeValidation(errs))
		}
	}
	return problems
}

// checkOutside checks the answer to a request no operation of the
// document takes. The server routes by pattern, not by the document, so
// such a request may reach a neighbouring route: besides 404 (unknown path)
// and 405 (known path, other method), it may answer 401 or 429 where that
// route needs a token, 404 for another method on a route that shares its
// pattern, 405 for an unknown path that fits another method's pattern, and
// 400 where it fits an operation's pattern with a malformed id. Each is
// the error envelope of its status.
func (c *contract) checkOutside(status int, body []byte) []string {
	sch, ok := c.outside[status]
	if !ok {
		return []string{fmt.Sprintf("outside the document's operations: HTTP %d, want one of %v", status, slices.Sorted(maps.Keys(c.outside)))}
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return []string{fmt.Sprintf("outside the document's operations: body is not JSON: %v", err)}
	}
	if err := sch.Validate(v); err != nil {
		return []string{fmt.Sprintf("outside the document's operations: HTTP %d: %v", status, err)}
	}
	return nil
}

func describeValidation(errs []*liberrors.ValidationError) string {
	const most = 5
	var b strings.Builder
	for i, e := range errs[:min(len(errs), most)] {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(e.Message)
		if e.Reason != "" && e.Reason != e.Message {
			b.WriteString(" (" + e.Reason + ")")
		}
		for j, f := range e.SchemaValidationErrors {
			if j == most {
				fmt.Fprintf(&b, " [and %d more]", len(e.SchemaValidationErrors)-most)
				break
			}
			fmt.Fprintf(&b, " [%s at %s]", f.Reason, cmp.Or(f.FieldPath, f.KeywordLocation))
		}
	}
	if len(errs) > most {
		fmt.Fprintf(&b, "; and %d more", len(errs)-most)
	}
	return b.String()
}

// contractTransport checks every exchange of the test client against the
// contract, and fails the test that started the service on a mismatch.
type contractTransport struct {
	t    testing.TB
	c    *contract
	next http.RoundTripper
}

func (ct *contractTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil {
		var err error
		reqBody, err = io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		// A RoundTripper must not change the caller's request: send a copy.
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	resp, err := ct.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "text/event-stream" {
		// A stream does not end: its head is checked here, its events by
		// the test that reads them.
		if problems := ct.c.check(req, reqBody, resp, nil); len(problems) > 0 {
			ct.t.Errorf("contract: %s %s → HTTP %d breaks api/openapi.json:\n  %s", req.Method, req.URL.RequestURI(), resp.StatusCode, strings.Join(problems, "\n  "))
		}
		return resp, nil
	}
	respBody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	if problems := ct.c.check(req, reqBody, resp, respBody); len(problems) > 0 {
		msg := fmt.Sprintf("contract: %s %s → HTTP %d breaks the API's documents:\n  %s\n  body: %.500s",
			req.Method, req.URL.RequestURI(), resp.StatusCode, strings.Join(problems, "\n  "), respBody)
		// A *testing.F must not fail from inside its fuzz target: there the
		// breach is the request's error, which the target reports on the
		// input's own *testing.T.
		if _, fuzzing := ct.t.(*testing.F); fuzzing {
			return nil, errors.New(msg)
		}
		ct.t.Errorf("%s", msg)
	}
	return resp, nil
}

// checkEventContract holds every event in the log at natsURL to its JSON
// Schema and to the CloudEvents headers a consumer relies on. A log that
// cannot be reached (an embedded NATS gone with its service, or one a test
// shut down on purpose) is not checked.
func checkEventContract(t testing.TB, natsURL string) {
	t.Helper()
	if natsURL == "" {
		return
	}
	msgs, err := readLog(natsURL)
	if err != nil {
		t.Logf("event contract not checked: %v", err)
		return
	}
	schemas := eventSchemas{}
	failed := 0
	for _, m := range msgs {
		problems := schemas.check(m)
		if len(problems) == 0 {
			continue
		}
		if failed++; failed <= 10 {
			t.Errorf("event contract: seq %d on %s: %s\n  data: %.300s", m.Seq, m.Subject, strings.Join(problems, "; "), m.Data)
		}
	}
	if failed > 10 {
		t.Errorf("event contract: %d events in all break it", failed)
	}
}

// eventSchemas compiles each event schema once, by its ce-dataschema.
type eventSchemas map[string]*jsonschema.Schema

func (es eventSchemas) get(typ string, version int) (*jsonschema.Schema, error) {
	id := natslog.DataSchema(typ, version)
	if s, ok := es[id]; ok {
		return s, nil
	}
	raw, ok := events.Schema(typ, version)
	if !ok {
		return nil, fmt.Errorf("no schema for %s v%d", typ, version)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource(id, doc); err != nil {
		return nil, err
	}
	s, err := c.Compile(id)
	if err != nil {
		return nil, err
	}
	es[id] = s
	return s, nil
}

// check returns what in one stored message breaks the event contract.
func (es eventSchemas) check(m logMessage) []string {
	var problems []string
	h := m.Header
	ws, agg, err := events.ParseSubject(m.Subject)
	if err != nil {
		return []string{err.Error()}
	}
	if !slices.Contains([]string{events.KindInbox, events.KindHoliday, events.KindResource, events.KindWorkspace}, agg.Kind) {
		problems = append(problems, "unknown aggregate kind "+agg.Kind)
	}
	version, verr := strconv.Atoi(h.Get("ce-schemaversion"))
	if verr != nil || version < 1 {
		problems = append(problems, fmt.Sprintf("ce-schemaversion %q is not a version", h.Get("ce-schemaversion")))
	}
	typ := h.Get("ce-type")
	for _, c := range []struct{ header, want string }{
		{"ce-specversion", "1.0"},
		{"ce-source", "/astro/workspaces/" + ws},
		{"ce-subject", agg.Kind + "/" + agg.ID},
		{"ce-datacontenttype", "application/json"},
		{"ce-dataschema", natslog.DataSchema(typ, version)},
		{"ce-workspaceid", ws},
		{"ce-id", h.Get(nats.MsgIdHdr)}, // the id the log de-duplicates on
	} {
		if got := h.Get(c.header); got != c.want || got == "" {
			problems = append(problems, fmt.Sprintf("%s %q, want %q", c.header, got, c.want))
		}
	}
	for _, name := range []string{"ce-id", "ce-type", "ce-actorid"} {
		if h.Get(name) == "" {
			problems = append(problems, name+" missing")
		}
	}
	if _, err := time.Parse(time.RFC3339Nano, h.Get("ce-time")); err != nil {
		problems = append(problems, fmt.Sprintf("ce-time %q: %v", h.Get("ce-time"), err))
	}
	if typ == "" || verr != nil {
		return problems
	}
	sch, err := es.get(typ, version)
	if err != nil {
		return append(problems, err.Error())
	}
	data, err := jsonschema.UnmarshalJSON(bytes.NewReader(m.Data))
	if err != nil {
		return append(problems, "data is not JSON: "+err.Error())
	}
	if err := sch.Validate(data); err != nil {
		problems = append(problems, fmt.Sprintf("data does not match %s: %v", natslog.DataSchema(typ, version), err))
	}
	// What every consumer in this repository does with it.
	e, err := natslog.Decode(m.Subject, h, m.Data, m.Seq)
	if err == nil {
		_, err = events.Decode(e)
	}
	if err != nil {
		problems = append(problems, "does not decode: "+err.Error())
	}
	return problems
}

func TestOpenAPIServed(t *testing.T) {
	s := startService(t)
	resp, err := s.client.Get(s.base + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("HTTP %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if !bytes.Equal(body, api.OpenAPI) {
		t.Fatal("served document differs from api/openapi.json")
	}
	doc, err := libopenapi.NewDocument(body)
	if err != nil {
		t.Fatal(err)
	}
	if v := doc.GetVersion(); !strings.HasPrefix(v, "3.1.") {
		t.Fatalf("openapi %q, want 3.1.x", v)
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		t.Fatalf("not a valid OpenAPI 3.1 document: %s", describeValidation(verrs))
	}
	// Every operation names its answers, and every answer is in the
	// envelope; a write takes an Idempotency-Key. A stream ticket's POST
	// writes nothing (a retry gets a fresh ticket, where a replay would
	// give one that may have expired) and takes none: the document said
	// it did, and the key was ignored.
	for path, item := range model.Model.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			if op.OperationId == "" || op.Responses == nil || op.Responses.Codes.GetOrZero("200") == nil {
				t.Errorf("%s %s: no operationId or no 200 answer", method, path)
			}
			keyed := slices.ContainsFunc(op.Parameters, func(p *v3.Parameter) bool { return p.Name == "Idempotency-Key" })
			switch ticket := path == "/api/data/notifications/stream/ticket"; {
			case method != "get" && !ticket && !keyed:
				t.Errorf("%s %s: a write without the Idempotency-Key header", method, path)
			case ticket && keyed:
				t.Errorf("%s %s: documents an Idempotency-Key it ignores", method, path)
			}
		}
	}
}
