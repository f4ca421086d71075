package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"astro/events/natsserver"
	"astro/projections/pgtest"
)

// TestStartWaitsForTheLog starts the service before its NATS server, as a
// service restarted while a cluster elects new stream leaders meets a log
// that answers nothing for some seconds: it waits and comes up with the
// log, rather than exit.
func TestStartWaitsForTheLog(t *testing.T) {
	natsAddr := "127.0.0.1:" + freePort(t)
	w := startWaitingForLog(t, natsAddr)
	ns, err := natsserver.Start(context.Background(), natsserver.Config{StoreDir: t.TempDir(), Listen: natsAddr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)

	waitFor(t, 60*time.Second, func() error {
		w.running()
		base := w.announced("astro: listening on ")
		if base == "" {
			return fmt.Errorf("not listening yet")
		}
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %d", resp.StatusCode)
		}
		return nil
	})
	w.cancel()
	stopped(t, w.done, &w.stderr)
}

// TestStopWhileWaitingForTheLog: a service told to stop while it waits
// for its log stops at once, as any stop does: without an error, which
// blamed the log it was waiting for and made main exit 1.
func TestStopWhileWaitingForTheLog(t *testing.T) {
	w := startWaitingForLog(t, "127.0.0.1:"+freePort(t))
	w.cancel()
	select {
	case err := <-w.done:
		if err != nil {
			t.Errorf("run told to stop while starting: %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("astro still waiting for its log 5s after it was told to stop\n%s", w.stderr.String())
	}
}

// startWaitingForLog runs the service on a NATS URL at natsAddr, where
// nothing answers yet, and returns once it logged that it waits.
func startWaitingForLog(t *testing.T, natsAddr string) *mainRun {
	t.Helper()
	w := runAsMain(t, map[string]string{
		"ASTRO_HTTP_ADDR":    "127.0.0.1:0",
		"ASTRO_DATA_DIR":     t.TempDir(),
		"ASTRO_NATS_URL":     "nats://" + natsAddr,
		"ASTRO_DATABASE_URL": pgtest.URL(t),
		"ASTRO_JWT_SECRET":   testSecret,
		"ASTRO_LOG_LEVEL":    "warn",
	})
	waitFor(t, 30*time.Second, func() error {
		w.running()
		if !strings.Contains(w.stderr.String(), "event log unavailable at start, waiting") {
			return fmt.Errorf("no wait for the log logged:\n%s", w.stderr.String())
		}
		return nil
	})
	return w
}
