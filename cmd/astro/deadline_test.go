package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"astro/events/natsserver"
	"astro/events/natstest"
	"astro/projections/pgtest"
)

// TestDeadlineWithLogUnreachable: with the log gone, a send answered
// nothing for over ten minutes (its retries had no deadline). Every request
// now carries one; past it the answer is 503 with Retry-After.
func TestDeadlineWithLogUnreachable(t *testing.T) {
	storeDir := t.TempDir()
	ns, err := natsserver.Start(context.Background(), natsserver.Config{StoreDir: storeDir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	url := ns.ClientURL()
	// Registered first so that it runs last, after the service stopped and
	// the log was checked: whichever server is up then.
	t.Cleanup(func() { ns.Shutdown() })
	const timeout = 2 * time.Second
	s := startWithEnv(t, map[string]string{
		"ASTRO_HTTP_ADDR":       "127.0.0.1:0",
		"ASTRO_DATA_DIR":        t.TempDir(),
		"ASTRO_NATS_URL":        url,
		"ASTRO_DATABASE_URL":    pgtest.URL(t),
		"ASTRO_JWT_SECRET":      testSecret,
		"ASTRO_RATE_LIMIT":      "off",
		"ASTRO_LOG_LEVEL":       "error",
		"ASTRO_REQUEST_TIMEOUT": timeout.String(),
	})
	svc := token(t, "svc", "w1", "notifications:send")
	alice := token(t, "alice", "w1")
	body := map[string]any{"recipientId": "alice", "senderId": "00005fc0-0000-4000-8000-000000000002", "notificationType": "t"}
	s.call("POST", "/api/data/notifications", svc, body).want(t, 200)

	ns.Shutdown()
	for _, c := range []struct {
		method, path, tok string
		body              any
		headers           []string
	}{
		{"POST", "/api/data/notifications", svc, body, nil},
		{"POST", "/api/data/notifications", svc, body, []string{"Idempotency-Key", "k1"}},
		{"POST", "/api/data/holidays", alice, map[string]any{"reason": "R", "type": "global", "dateFrom": "2027-01-01", "dateTo": "2027-01-01"}, nil},
	} {
		start := time.Now()
		env := s.callRaw(t, c.method, c.path, c.tok, c.body, c.headers...)
		took := time.Since(start)
		t.Logf("%s %s with the log down: HTTP %d after %v", c.method, c.path, env.Status, took.Round(time.Millisecond))
		if env.Status != 503 || env.Header.Get("Retry-After") == "" || env.StatusCode != "ServiceUnavailable" || env.Error == nil {
			t.Errorf("%s %s with the log down: HTTP %d, Retry-After %q: %s", c.method, c.path, env.Status, env.Header.Get("Retry-After"), env.raw)
		}
		// The deadline, plus what the idempotency record may take to give up.
		if took > timeout+12*time.Second {
			t.Errorf("%s %s answered after %v, deadline %v", c.method, c.path, took, timeout)
		}
	}

	// The log comes back where it was: the service goes on by itself.
	_, port, _ := net.SplitHostPort(url[len("nats://"):])
	ns, err = natsserver.Start(context.Background(), natsserver.Config{StoreDir: storeDir, Listen: "127.0.0.1:" + port})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() error {
		if st := s.callRaw(t, "POST", "/api/data/notifications", svc, body).Status; st != 200 {
			return fmt.Errorf("no send succeeded after the log came back: HTTP %d", st)
		}
		return nil
	})
}

// callRaw is call without the envelope rules' ban on 5xx, for tests that
// expect one; the answer must still be an envelope.
func (s *service) callRaw(t *testing.T, method, path, tok string, body any, headers ...string) envelope {
	t.Helper()
	buf, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, s.base+path, bytes.NewReader(buf))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	env := envelope{Status: resp.StatusCode, Header: resp.Header, raw: raw}
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatalf("%s %s: HTTP %d, not an envelope: %s", method, path, resp.StatusCode, raw)
	}
	return env
}

// TestSlowBodyIsOutOfTime: a body still coming at the server's ReadTimeout
// (ASTRO_REQUEST_TIMEOUT) answered 400 "The body could not be read"; the
// request is out of time, not bad: 503 with Retry-After, as at any
// deadline.
func TestSlowBodyIsOutOfTime(t *testing.T) {
	s := startService(t, func(env map[string]string) { env["ASTRO_REQUEST_TIMEOUT"] = "1s" })
	alice := token(t, "alice", "w1")
	body, more := io.Pipe()
	t.Cleanup(func() { more.Close() })
	go func() { _, _ = more.Write([]byte(`{"reason":"Slow",`)) }() // and nothing more
	// Bounded: a server that kept waiting for the body would answer never.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/api/data/holidays", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+alice)
	// Not s.client: its contract check reads the whole body before sending.
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var env envelope
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		t.Fatalf("HTTP %d, not an envelope: %v", resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || env.StatusCode != "ServiceUnavailable" || resp.Header.Get("Retry-After") == "" || env.Error == nil {
		t.Errorf("HTTP %d %s, Retry-After %q, error %+v; want 503 with Retry-After", resp.StatusCode, env.StatusCode, resp.Header.Get("Retry-After"), env.Error)
	}
}

// A NATS node gone silent without closing its sockets (stopped, or cut off
// by a partition) is noticed in seconds, and the connection goes to
// another: with nats.go's defaults, a ping every two minutes and two
// unanswered, an instance on such a node answered every request at its
// deadline for five minutes while the rest of the cluster served.
func TestASilentNATSNodeIsNoticed(t *testing.T) {
	srv := natstest.ServerWith(t, natsserver.Config{Listen: "127.0.0.1:0"})
	link, url := pgtest.NewFreezer(t, srv.ClientURL())
	inf := &infra{}
	t.Cleanup(inf.Close)
	nc, err := inf.connectNATS(t.Context(), Config{NATSURL: url}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	link.Freeze()
	defer link.Thaw()
	frozen := time.Now()
	waitFor(t, 30*time.Second, func() error {
		if nc.Status() == nats.CONNECTED {
			return fmt.Errorf("the connection to a silent node still says %v", nc.Status())
		}
		return nil
	})
	t.Logf("noticed after %v", time.Since(frozen).Round(time.Second))
}
