package api

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/julienschmidt/httprouter"
	"github.com/nats-io/nats.go/jetstream"

	"astro/api/idempotency"
	"astro/commands"
	"astro/events/natstest"
)

// TestIdempotentWriteOutOfTime: a write under an Idempotency-Key runs
// under its own bound (maxWrite), inside the request's deadline. When
// that bound cuts the write short, the answer is the one of any deadline,
// 503 with Retry-After, not a 500.
func TestIdempotentWriteOutOfTime(t *testing.T) {
	js, err := jetstream.New(natstest.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	store, err := idempotency.Open(t.Context(), js, idempotency.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{cfg: Config{Idempotency: store, MaxBodyBytes: 1 << 10}, log: slog.New(slog.DiscardHandler), metrics: noMetrics{}, maxWrite: 50 * time.Millisecond}
	// A write that takes as long as it is let, then fails as a cancelled
	// query does: with an internal error.
	slow := func(w http.ResponseWriter, r *http.Request, _ httprouter.Params, _ commands.Caller) error {
		<-r.Context().Done()
		return fmt.Errorf("append: %w", r.Context().Err())
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // the request's deadline, far off
	defer cancel()
	r := httptest.NewRequestWithContext(ctx, "POST", "/api/data/notifications", strings.NewReader(`{}`))
	w := httptest.NewRecorder()
	if err := s.idempotent(w, r, nil, commands.Caller{WorkspaceID: "w1", UserID: "svc"}, slow, "k1"); err != nil {
		t.Fatal(err)
	}
	var env Envelope
	if err := json.Unmarshal(w.Body.Bytes(), &env); err != nil {
		t.Fatalf("%s: %v", w.Body, err)
	}
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" || env.StatusCode != "ServiceUnavailable" {
		t.Fatalf("a keyed write past its bound: HTTP %d, Retry-After %q: %s", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
}

// Once the claim has been taken over (here by an instance whose clock is
// ahead), the first request's Finish can never succeed: it is not retried,
// where it was until its 10 s bound, and the client's answer waited.
func TestFinishOfAClaimTakenOverIsNotRetried(t *testing.T) {
	js, err := jetstream.New(natstest.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	store, err := idempotency.Open(t.Context(), js, idempotency.Config{Bucket: "IDEM_TAKEN"})
	if err != nil {
		t.Fatal(err)
	}
	ahead, err := idempotency.Open(t.Context(), js, idempotency.Config{Bucket: "IDEM_TAKEN", Now: func() time.Time { return time.Now().Add(20 * time.Second) }})
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{cfg: Config{Idempotency: store, MaxBodyBytes: 1 << 10}, log: slog.New(slog.DiscardHandler), metrics: noMetrics{}, maxWrite: 10 * time.Second}
	c := commands.Caller{WorkspaceID: "w1", UserID: "svc"}
	var request string
	h := func(w http.ResponseWriter, r *http.Request, _ httprouter.Params, _ commands.Caller) error {
		// Another instance's retry of the same request takes the key over.
		if _, _, err := ahead.Begin(r.Context(), idempotency.Key("w1", "svc", "k1"), request); err != nil {
			t.Error(err)
		}
		writeOK(w, map[string]int{"n": 1})
		return nil
	}
	r := httptest.NewRequestWithContext(context.Background(), "POST", "/api/data/notifications", strings.NewReader(`{}`))
	request = idempotency.RequestHash("POST", r.URL.RequestURI(), []byte(`{}`), "", "")
	w := httptest.NewRecorder()
	start := time.Now()
	if err := s.idempotent(w, r, nil, c, h, "k1"); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("answered %d after %v", w.Code, took)
	if took > 5*time.Second {
		t.Errorf("the answer waited %v for a Finish that could never succeed", took)
	}
}
