package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape is one reading of /metrics: metric families by name.
type scrape map[string]*dto.MetricFamily

func (s *service) scrape(url string) scrape {
	s.t.Helper()
	client := s.client
	if !strings.HasPrefix(url, s.base) {
		client = http.DefaultClient // not the API: no contract to hold it to
	}
	resp, err := client.Get(url)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		s.t.Fatalf("GET %s: %d\n%s", url, resp.StatusCode, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		s.t.Fatalf("GET %s: not the Prometheus text format: %v", url, err)
	}
	return fams
}

// value is the sum of the samples of name whose labels include every
// label given as name=value pairs (a histogram counts its observations);
// -1 when no such sample exists.
func (sc scrape) value(name string, labels ...string) float64 {
	fam := sc[name]
	if fam == nil {
		return -1
	}
	found, sum := false, 0.0
next:
	for _, m := range fam.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			ok := false
			for _, l := range m.Label {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					ok = true
				}
			}
			if !ok {
				continue next
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		case m.Untyped != nil:
			sum += m.Untyped.GetValue()
		}
	}
	if !found {
		return -1
	}
	return sum
}

// TestMetrics scrapes /metrics before and after traffic and checks each
// figure moved as the traffic should have moved it.
func TestMetrics(t *testing.T) {
	s := startService(t, func(env map[string]string) { env["ASTRO_RATE_LIMIT"] = "5" })
	before := s.scrape(s.base + "/metrics")
	const sendRoute = "/api/data/notifications"
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total", "astro_projector_position", "astro_projector_lag_events",
		"astro_projector_lag_seconds", "astro_projector_log_last_sequence", "astro_projector_state", "astro_projector_parked_events_total",
		"astro_log_appends_total"} {
		if before[name] == nil {
			t.Errorf("%s is not exposed", name)
		}
	}
	if v := before.value("astro_projector_state", "projector", "notifications", "state", "running"); v != 1 {
		t.Errorf("notifications projector state running = %v, want 1", v)
	}

	ws := "w-metrics"
	tok := sender(t, ws)
	const sends = 5
	for i := range sends {
		s.send(tok, "bob", "alice", fmt.Sprintf("t%d", i))
	}
	bob := token(t, "bob", ws)
	if p := s.page(bob, ""); p.TotalCount == 0 {
		t.Fatal("bob's read model has none of his notifications")
	}
	body := map[string]any{"recipientId": "carol", "senderId": idOf("alice"), "notificationType": "x", "subject": "s", "message": "m"}
	s.call("POST", sendPath, tok, body, "Idempotency-Key", "metrics-key-1").want(t, 200)
	s.call("POST", sendPath, tok, body, "Idempotency-Key", "metrics-key-1").want(t, 200)
	// One caller past its rate (5/s, bursts of 10).
	limited := false
	for i := 0; i < 200 && !limited; i++ {
		limited = s.call("GET", "/api/data/notifications/unreadcount", bob, nil).Status == http.StatusTooManyRequests
	}
	if !limited {
		t.Fatal("200 reads at once were never rate-limited")
	}

	// The projector catches up: its lag goes to 0 and its position to the log's end.
	var after scrape
	waitFor(t, 30*time.Second, func() error {
		after = s.scrape(s.base + "/metrics")
		if after.value("astro_projector_lag_events", "projector", "notifications") == 0 &&
			after.value("astro_projector_position", "projector", "notifications") >= float64(sends+1) {
			return nil
		}
		return fmt.Errorf("notifications projector did not catch up: lag %v, position %v",
			after.value("astro_projector_lag_events", "projector", "notifications"), after.value("astro_projector_position", "projector", "notifications"))
	})
	moved := func(name string, labels ...string) float64 {
		b := max(before.value(name, labels...), 0)
		return after.value(name, labels...) - b
	}
	for _, c := range []struct {
		name   string
		labels []string
		min    float64
	}{
		{"astro_http_requests_total", []string{"method", "POST", "route", sendRoute, "code", "200"}, sends + 2},
		{"astro_http_request_duration_seconds", []string{"method", "POST", "route", sendRoute, "code", "200"}, sends + 2},
		// Under the path it names, not with the streams' lifetimes under
		// /notifications/:name.
		{"astro_http_requests_total", []string{"method", "GET", "route", "/api/data/notifications/unreadcount", "code", "429"}, 1},
		{"astro_http_requests_total", []string{"method", "GET", "route", "/metrics"}, 1},
		{"astro_http_rate_limited_total", nil, 1},
		{"astro_idempotent_replays_total", nil, 1},
		{"astro_log_appends_total", []string{"outcome", "ok"}, sends + 1},
		{"astro_log_append_duration_seconds", nil, sends + 1},
		{"astro_aggregate_cache_misses_total", []string{"aggregate", "inbox"}, 2}, // bob's and carol's inboxes
		{"astro_aggregate_cache_hits_total", []string{"aggregate", "inbox"}, sends - 1},
		{"astro_aggregate_cold_load_duration_seconds", []string{"aggregate", "inbox"}, 2},
		{"astro_projector_batch_size", []string{"projector", "notifications"}, 1},
		{"astro_projector_apply_duration_seconds", []string{"projector", "notifications"}, 1},
		{"astro_projector_position", []string{"projector", "notifications"}, sends + 1},
	} {
		if got := moved(c.name, c.labels...); got < c.min {
			t.Errorf("%s%v moved by %v, want at least %v", c.name, c.labels, got, c.min)
		}
	}
	for _, c := range []struct {
		name   string
		labels []string
	}{
		{"astro_idempotent_replays_total", nil}, // exactly the one replay
		{"astro_projector_parked_events_total", []string{"projector", "notifications"}},
		{"astro_log_appends_total", []string{"outcome", "error"}},
	} {
		want := map[string]float64{"astro_idempotent_replays_total": 1}[c.name]
		if got := moved(c.name, c.labels...); got != want {
			t.Errorf("%s%v moved by %v, want %v", c.name, c.labels, got, want)
		}
	}
	// The batch sizes add up to the events applied.
	var applied float64
	for _, m := range after["astro_projector_batch_size"].Metric {
		for _, l := range m.Label {
			if l.GetValue() == "notifications" {
				applied = m.Histogram.GetSampleSum()
			}
		}
	}
	if applied < sends+1 {
		t.Errorf("notifications batches applied %v events, want at least %d", applied, sends+1)
	}
}

// TestMetricsApart serves /metrics on its own address: the API's port
// then has none.
func TestMetricsApart(t *testing.T) {
	s := startService(t, func(env map[string]string) { env["ASTRO_METRICS_ADDR"] = "127.0.0.1:0" })
	if s.metricsBase == "" {
		t.Fatal("no metrics address")
	}
	url := s.metricsBase + "/metrics"
	if sc := s.scrape(url); sc.value("astro_projector_position", "projector", "holidays") < 0 {
		t.Errorf("holidays projector position not exposed on %s", url)
	}
	s.call("GET", "/metrics", "", nil).want(t, 404)
}

// TestProfilesApart: ASTRO_DEBUG_ADDR serves Go's profiles on an address
// of their own, and never on the API's port.
func TestProfilesApart(t *testing.T) {
	if s := startService(t); s.debugBase != "" {
		t.Fatalf("profiles served at %s without ASTRO_DEBUG_ADDR", s.debugBase)
	}
	s := startService(t, func(env map[string]string) { env["ASTRO_DEBUG_ADDR"] = "127.0.0.1:0" })
	if s.debugBase == "" {
		t.Fatal("no profiles address")
	}
	resp, err := http.Get(s.debugBase + "/debug/pprof/heap?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "heap profile") {
		t.Fatalf("heap profile: %d %.200s", resp.StatusCode, body)
	}
	s.call("GET", "/debug/pprof/", "", nil).want(t, 404)
}
