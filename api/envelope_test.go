package api

import (
	"bytes"
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lib/pq"

	"astro/commands"
)

// TestWriteErrorOfAnEndedRequest: a client that went away is logged as
// such, not as a failure with status 500; a request past its deadline
// answers 503 with Retry-After, whatever error the cancelled work returned.
func TestWriteErrorOfAnEndedRequest(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	cutOff, cancel3 := context.WithCancelCause(context.Background())
	cancel3(ErrCutOff)
	cause := errors.New("pq: canceling statement due to user request")
	cases := []struct {
		name        string
		ctx         context.Context
		status      int
		logs, logs2 string // what the log line must and must not hold
		err         error  // cause when nil
	}{
		{"client gone", cancelled, 0, "client disconnected", "status=500", nil},
		{"cut off at shutdown", cutOff, 0, "level=WARN msg=\"request cut off", "client disconnected", nil},
		// net/http cancels the context of a request whose body read hit
		// its ReadTimeout too; that client waits for its 503.
		{"body still coming at the deadline", cancelled, 503, "status=503", "client disconnected",
			&commands.Error{Code: commands.EUnavailable, Message: "late", Err: fmt.Errorf("%w: %w", errBodyTimeout, os.ErrDeadlineExceeded)}},
		{"deadline passed", expired, 503, "status=503", "status=500", nil},
		{"plain failure", context.Background(), 500, "status=500", "client disconnected", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var logged bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
			w := httptest.NewRecorder()
			r := httptest.NewRequest("GET", "/api/data/holidays/resource", nil).WithContext(c.ctx)
			err := c.err
			if err == nil {
				err = cause
			}
			writeError(w, r, log, err)
			if !strings.Contains(logged.String(), c.logs) || strings.Contains(logged.String(), c.logs2) {
				t.Errorf("logged %q, want %q and not %q", logged.String(), c.logs, c.logs2)
			}
			if c.status == 0 {
				if w.Body.Len() != 0 {
					t.Errorf("answered a gone client: %s", w.Body)
				}
				return
			}
			if w.Code != c.status {
				t.Errorf("HTTP %d, want %d: %s", w.Code, c.status, w.Body)
			}
			if c.status == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" {
				t.Error("503 without Retry-After")
			}
		})
	}
}

// A read model out of reach (PostgreSQL restarting, a failover, the
// network) is a 503 a client retries; other failures stay 500.
func TestErrorEnvelopeOfAnUnreachableDatabase(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want int
	}{
		{"shutting down", fmt.Errorf("count notifications: %w", &pq.Error{Code: "57P03"}), http.StatusServiceUnavailable},
		{"terminated by the administrator", &pq.Error{Code: "57P01"}, http.StatusServiceUnavailable},
		{"connection failure", &pq.Error{Code: "08006"}, http.StatusServiceUnavailable},
		{"too many connections", &pq.Error{Code: "53300"}, http.StatusServiceUnavailable},
		{"bad connection", fmt.Errorf("list: %w", driver.ErrBadConn), http.StatusServiceUnavailable},
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, http.StatusServiceUnavailable},
		{"a unique violation", &pq.Error{Code: "23505"}, http.StatusInternalServerError},
		{"a bug", errors.New("nil map"), http.StatusInternalServerError},
	} {
		if status, _ := ErrorEnvelope(c.err, "r1"); status != c.want {
			t.Errorf("%s: %d, want %d", c.name, status, c.want)
		}
	}
}

// TestAnswersCarryTheirLength: an answer past net/http's 2 KiB buffer (a
// holiday's, with its resources) is sent with its length, not chunked,
// and one that cannot be encoded is an error envelope, not a cut body.
func TestAnswersCarryTheirLength(t *testing.T) {
	for _, c := range []struct {
		name   string
		data   any
		status int
	}{
		{"small", map[string]string{"id": "x"}, 200},
		{"past 2 KiB", map[string]string{"reason": strings.Repeat("x", 5000)}, 200},
		{"not encodable", map[string]any{"f": func() {}}, 500},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { writeOK(w, c.data) }))
			t.Cleanup(srv.Close)
			resp, err := http.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body bytes.Buffer
			if _, err := body.ReadFrom(resp.Body); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != c.status || resp.ContentLength != int64(body.Len()) || len(resp.TransferEncoding) != 0 {
				t.Errorf("status %d, Content-Length %d for %d bytes, Transfer-Encoding %v; want %d, the body's length, none",
					resp.StatusCode, resp.ContentLength, body.Len(), resp.TransferEncoding, c.status)
			}
			if c.status == 500 && !strings.Contains(body.String(), `"hasError":true`) {
				t.Errorf("body %s, want an error envelope", body.String())
			}
		})
	}
}

// TestACutOffRequestGetsNoAnswer: a request cut off at shutdown closes its
// connection, rather than leave net/http to send the empty 200 of a
// handler that wrote nothing, which a client would take for its answer;
// through the idempotency recorder too.
func TestACutOffRequestGetsNoAnswer(t *testing.T) {
	for _, wrap := range []struct {
		name string
		w    func(http.ResponseWriter) http.ResponseWriter
	}{
		{"plain", func(w http.ResponseWriter) http.ResponseWriter { return w }},
		{"recorded", func(w http.ResponseWriter) http.ResponseWriter { return &recorder{ResponseWriter: w} }},
	} {
		t.Run(wrap.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx, cancel := context.WithCancelCause(r.Context())
				cancel(ErrCutOff)
				writeError(wrap.w(w), r.WithContext(ctx), nil, errors.New("cancelled"))
			}))
			defer srv.Close()
			resp, err := srv.Client().Get(srv.URL)
			if err == nil {
				resp.Body.Close()
				t.Fatalf("answered %d, want the connection closed", resp.StatusCode)
			}
		})
	}
}
