package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"astro/api/auth"
	"astro/events"
	"astro/events/natslog"
	"astro/events/natsserver"
	"astro/projections/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

const testSecret = "test-secret-test-secret-test-secret-0123456789"

// service is one Astro started through run, as main starts it, on an
// embedded NATS and a fresh database of the shared test PostgreSQL.
type service struct {
	t      testing.TB
	base   string
	env    map[string]string
	client *http.Client // every test request goes through it
	stop   func()       // stops this instance; Cleanup calls it too
}

type serviceOption func(env map[string]string)

func startService(t testing.TB, opts ...serviceOption) *service {
	t.Helper()
	// NATS runs beside the service, not inside it, so that tests can read
	// the log and restart the service on the same log and database.
	ns, err := natsserver.Start(context.Background(), natsserver.Config{StoreDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	env := map[string]string{
		"ASTRO_HTTP_ADDR":    "127.0.0.1:0",
		"ASTRO_DATA_DIR":     t.TempDir(),
		"ASTRO_NATS_URL":     ns.ClientURL(),
		"ASTRO_DATABASE_URL": pgtest.URL(t),
		"ASTRO_JWT_SECRET":   testSecret,
		"ASTRO_RATE_LIMIT":   "off", // tests that need it turn it on
		"ASTRO_LOG_LEVEL":    "warn",
	}
	for _, o := range opts {
		o(env)
	}
	return startWithEnv(t, env)
}

func startWithEnv(t testing.TB, env map[string]string) *service {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, nil, func(k string) string { return env[k] }, pw, &stderr)
		pw.Close()
	}()
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "astro: listening on "); ok {
				addr <- a
			}
		}
	}()
	var base string
	select {
	case base = <-addr:
	case err := <-done:
		cancel()
		t.Fatalf("astro exited before listening: %v\n%s", err, stderr.String())
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatalf("astro did not start in time\n%s", stderr.String())
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("astro stopped with %v\n%s", err, stderr.String())
				}
			case <-time.After(30 * time.Second):
				t.Errorf("astro did not stop in time")
			}
		})
	}
	t.Cleanup(stop)
	s := &service{t: t, base: base, env: env, client: &http.Client{Timeout: time.Minute}, stop: stop}
	s.waitReady()
	return s
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
	nc, err := nats.Connect(s.env["ASTRO_NATS_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, _ := jetstream.New(nc)
	stream, err := js.Stream(ctx, "ASTRO_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []events.Event
	if info.State.Msgs == 0 {
		return out
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, ty := range types {
		want[ty] = true
	}
	for seq := uint64(0); seq < info.State.LastSeq; {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("read log at %d of %d: %v", seq, info.State.LastSeq, err)
		}
		meta, _ := m.Metadata()
		seq = meta.Sequence.Stream
		e, err := natslog.Decode(m.Subject(), m.Headers(), m.Data(), seq)
		if err != nil {
			t.Fatal(err)
		}
		if len(want) == 0 || want[e.Type] {
			out = append(out, e)
		}
	}
	return out
}
