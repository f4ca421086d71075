//go:build faults

package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"astro/api/auth"
	"astro/events/natsserver"
)

// failFastBound is how long a write may take to fail once the log is gone:
// "a few seconds, never a hang". Not a speed claim: before the fix such a
// write hung for as long as its client waited.
const failFastBound = 10 * time.Second

// TestFaultsStreamDeleted deletes the event stream with Astro's own rights
// in the middle of a write load, on the default setup (embedded NATS with
// credentials). Every write from then on must fail fast with 503 and
// Retry-After, /readyz must say why, Astro must not recreate the stream
// while running, and must refuse to start on an empty log over read models
// that applied events.
func TestFaultsStreamDeleted(t *testing.T) {
	bins := buildBinaries(t, t.TempDir())
	pg := startPG(t)
	dir := t.TempDir()
	// Astro's defaults: the embedded NATS server with credentials, here
	// listening for TCP clients so that the test can reach it as admin.
	s := newAstro(bins.astro, dir, freePort(t), map[string]string{
		"ASTRO_NATS_LISTEN":  "127.0.0.1:0",
		"ASTRO_DATABASE_URL": pg.createDB(t, "svc_streamdeleted"),
		"ASTRO_RATE_LIMIT":   "off",
	})
	startReady(t, s)
	admin, err := jetstream.New(adminConn(t, s.dataDir))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	svc, err := auth.Sign([]byte(secret), auth.Claims{UserID: "svc", WorkspaceID: "acme", Scopes: []string{"notifications:send"}}, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 2 * failFastBound}

	type answer struct {
		status     int
		retryAfter string
		took       time.Duration
		started    time.Time
	}
	var (
		mu      sync.Mutex
		answers []answer
		sent    atomic.Int64
		// deletedAt is when the stream was gone (UnixNano; 0 before), and
		// after counts the writes that started after it.
		deletedAt, after atomic.Int64
	)
	send := func(worker, i int) answer {
		body, _ := json.Marshal(map[string]any{
			"recipientId": fmt.Sprintf("user%d", i%7), "senderId": "00005fc0-0000-4000-8000-000000000002", "notificationType": "load",
			"subject": "s", "message": fmt.Sprintf("w%d-%d", worker, i),
		})
		req, _ := http.NewRequest(http.MethodPost, s.base+"/api/data/notifications", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+svc)
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return answer{status: -1, took: time.Since(start), started: start}
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), took: time.Since(start), started: start}
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; loadCtx.Err() == nil; i++ {
				a := send(w, i)
				sent.Add(1)
				if d := deletedAt.Load(); d != 0 && a.started.UnixNano() > d {
					after.Add(1)
				}
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
			}
		})
	}
	// Some load first, so that aggregates are cached and read models
	// have checkpoints.
	deadline := time.Now().Add(30 * time.Second)
	for sent.Load() < 100 {
		if time.Now().After(deadline) {
			t.Fatal("no load")
		}
		time.Sleep(10 * time.Millisecond) // polling the load's progress, bounded
	}
	if err := admin.DeleteStream(ctx, inboxStream); err != nil {
		t.Fatalf("delete the stream: %v", err)
	}
	deleted := time.Now()
	deletedAt.Store(deleted.UnixNano())
	// Writes in flight at the deletion may wait out their own bounds;
	// the ones started after it must each fail fast. A hang shows as
	// these never reaching the count.
	deadline = time.Now().Add(60 * time.Second)
	for after.Load() < 40 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling the load's progress, bounded
	}
	stopLoad()
	wg.Wait()

	var afterN, failed int
	for _, a := range answers {
		if !a.started.After(deleted) {
			continue // in flight at the deletion
		}
		afterN++
		switch {
		case a.status != http.StatusServiceUnavailable:
			t.Errorf("a write after the deletion answered %d", a.status)
		case a.retryAfter == "":
			t.Errorf("503 without Retry-After")
		case a.took > failFastBound:
			t.Errorf("a write took %v to fail", a.took)
		default:
			continue
		}
		if failed++; failed > 5 {
			t.Fatal("more writes broke the promise")
		}
	}
	if afterN < 40 {
		for _, a := range answers {
			if !a.started.Before(deleted) {
				t.Logf("after: %d in %v", a.status, a.took)
			}
		}
		t.Fatalf("only %d writes after the deletion in a minute: the load hung", afterN)
	}
	var slowest, inFlight time.Duration
	for _, a := range answers {
		if a.started.After(deleted) {
			slowest = max(slowest, a.took)
		} else if a.started.Add(a.took).After(deleted) {
			inFlight = max(inFlight, a.took)
		}
	}
	t.Logf("%d writes in all, %d after the deletion, each 503 with Retry-After, the slowest in %v; the slowest in flight at the deletion took %v",
		len(answers), afterN, slowest, inFlight)

	resp, err := hc.Get(s.base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&env)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || env.Error == nil || !strings.Contains(env.Error.Message, "event stream is missing") {
		t.Fatalf("/readyz: %d %+v", resp.StatusCode, env.Error)
	}

	// Running, Astro never recreates the stream.
	if _, err := admin.Stream(ctx, inboxStream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("the stream is back while the service runs: %v", err)
	}

	// Restarted on the same data, it refuses to start on an empty log.
	if err := s.term(30 * time.Second); err != nil {
		t.Fatalf("graceful stop: %v", err)
	} else if err := s.exitErr(); err != nil {
		t.Fatalf("graceful stop: the service exited with %v; log ends:\n%s", err, s.logTail(10))
	}
	// Starting takes its private PostgreSQL too: seconds, and on a loaded
	// CI machine once more than a minute.
	runCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	again := exec.CommandContext(runCtx, s.path, s.args...)
	again.Env, again.Stderr = s.env, &stderr
	err = again.Run()
	out := stderr.String()
	if err == nil || !strings.Contains(out, "event stream missing") || !strings.Contains(out, "read models have applied") {
		t.Fatalf("restart on a lost log: %v\n%s", err, out)
	}
	t.Logf("restart refused: %s", strings.TrimSpace(out))
}

// adminConn connects to the embedded NATS server of the service whose data
// directory is dataDir as Astro itself, with the password kept there, as
// only the service's owner can. The file names are the data directory's
// layout, which `astro nats-credentials` documents.
func adminConn(t *testing.T, dataDir string) *nats.Conn {
	t.Helper()
	url, err := os.ReadFile(filepath.Join(dataDir, "nats-url"))
	if err != nil {
		t.Fatalf("the running service did not say where its NATS listens: %v", err)
	}
	raw, err := os.ReadFile(filepath.Join(dataDir, "nats-passwords.json"))
	if err != nil {
		t.Fatal(err)
	}
	var p natsserver.Passwords
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(strings.TrimSpace(string(url)), nats.UserInfo(natsserver.UserAstro, p.Astro))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
