package metrics_test

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"astro/api/metrics"
	"astro/events"
)

func newMetrics(t *testing.T) (*metrics.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// TestRecordingAllocatesNothing: what a request, an append, a command and a
// batch record costs no allocation once its labels were resolved.
func TestRecordingAllocatesNothing(t *testing.T) {
	m, _ := newMetrics(t)
	route := m.Route("POST", "/api/data/notifications")
	route.Observe(200, time.Millisecond) // resolves the 200 children
	log, store, proj := m.Log(), m.Store("inbox"), m.Projector("notifications")
	conflict := errors.Join(events.ErrConflict)
	for name, f := range map[string]func(){
		"request":   func() { route.Observe(200, time.Millisecond) },
		"append":    func() { log.Appended(time.Millisecond, nil) },
		"conflict":  func() { log.Appended(time.Millisecond, conflict) },
		"cache hit": func() { store.CacheHit() },
		"cold load": func() { store.ColdLoad(time.Millisecond) },
		"batch":     func() { proj.Applied(10, time.Millisecond) },
		"limited":   func() { m.RateLimited() },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations, want 0", name, n)
		}
	}
}

// TestAppendOutcomes sorts appends by their error.
func TestAppendOutcomes(t *testing.T) {
	m, reg := newMetrics(t)
	log := m.Log()
	for _, err := range []error{nil, nil, events.ErrConflict, events.ErrAlreadyAppended, errors.New("unreachable")} {
		log.Appended(time.Millisecond, err)
	}
	log.Retried()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "astro_log_appends_total" {
			continue
		}
		for _, mt := range f.Metric {
			got[mt.Label[0].GetValue()] = mt.Counter.GetValue()
		}
	}
	want := map[string]float64{"ok": 2, "conflict": 1, "duplicate": 1, "error": 1}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("appends %s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "astro_log_append_retries_total"); err != nil || n != 1 {
		t.Errorf("append retries: %d series (%v), want 1", n, err)
	}
}

// TestNoDefaultRegistry: two instances in one process do not collide, as
// they would on a global registry.
func TestNoDefaultRegistry(t *testing.T) {
	newMetrics(t)
	newMetrics(t)
	if _, err := metrics.New(nil, nil); err == nil {
		t.Error("New without a registry succeeded")
	}
}
