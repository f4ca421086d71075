package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"astro/projections/pgtest"

	"github.com/jmoiron/sqlx"
	"github.com/nats-io/nats.go"
)

// baselines measures, in the same run, a raw JetStream publish and a raw
// PostgreSQL round trip against the servers the service uses.
func baselines(b *testing.B, s *service, n int) (publish, roundTrip time.Duration) {
	b.Helper()
	nc := s.connectNATS()
	js, _ := nc.JetStream()
	if _, err := js.AddStream(&nats.StreamConfig{Name: "BASELINE", Subjects: []string{"baseline.>"}}); err != nil {
		b.Fatal(err)
	}
	db, err := sqlx.Open("postgres", s.env["ASTRO_DATABASE_URL"])
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	start := time.Now()
	for range n {
		if _, err := js.Publish("baseline.x", []byte(`{"notificationId":"x"}`)); err != nil {
			b.Fatal(err)
		}
	}
	publish = time.Since(start) / time.Duration(n)
	start = time.Now()
	for range n {
		var one int
		if err := db.GetContext(context.Background(), &one, `SELECT 1`); err != nil {
			b.Fatal(err)
		}
	}
	return publish, time.Since(start) / time.Duration(n)
}

func do(b *testing.B, s *service, method, path, tok, body string) {
	req, _ := http.NewRequest(method, s.base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	// Not s.client: its contract check of every answer would cost more
	// than the request it measures.
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("%s %s: HTTP %d", method, path, resp.StatusCode)
	}
}

// BenchmarkHTTP: whole requests through the service (authentication,
// command and append for writes; for reads, the check that the read model
// reflects the log), as ratios to a raw JetStream publish and a raw
// PostgreSQL round trip.
func BenchmarkHTTP(b *testing.B) {
	s := startService(b)
	svc := sender(b, "w1")
	alice := token(b, "alice", "w1")
	send := `{"recipientId":"alice","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"task","subject":"s","message":"m"}`
	for range 50 {
		do(b, s, "POST", sendPath, svc, send)
	}
	cases := []struct{ name, method, path, tok, body string }{
		{"send", "POST", sendPath, svc, send},
		{"unreadcount", "GET", "/api/data/notifications/unreadcount", alice, ""},
		{"list", "GET", "/api/data/notifications?asFlatList=true", alice, ""},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			publish, roundTrip := baselines(b, s, max(b.N, 100))
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				do(b, s, c.method, c.path, c.tok, c.body)
			}
			per := time.Since(start) / time.Duration(b.N)
			b.ReportMetric(float64(per)/float64(publish), "x-raw-publish")
			b.ReportMetric(float64(per)/float64(roundTrip), "x-pg-roundtrip")
		})
	}
}

// BenchmarkHTTPWrites: deletes and renames through the service, as ratios
// to the same baselines. Deletes spread over users, each id deleted once.
func BenchmarkHTTPWrites(b *testing.B) {
	s := startService(b)
	svc := sender(b, "w1")
	b.Run("delete", func(b *testing.B) {
		type target struct{ tok, id string }
		targets := make([]target, 0, b.N)
		toks := map[string]string{}
		for i := range b.N {
			user := fmt.Sprintf("u%d", i%50)
			if toks[user] == "" {
				toks[user] = token(b, user, "w1")
			}
			env := s.call("POST", sendPath, svc, `{"recipientId":"`+user+`","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"task","subject":"s"}`).want(b, 200)
			var n notificationDto
			env.decode(b, &n)
			targets = append(targets, target{toks[user], n.ID})
		}
		publish, roundTrip := baselines(b, s, max(b.N, 100))
		b.ResetTimer()
		start := time.Now()
		for _, t := range targets {
			do(b, s, "DELETE", "/api/data/notifications/delete/"+t.id, t.tok, "")
		}
		per := time.Since(start) / time.Duration(b.N)
		b.ReportMetric(float64(per)/float64(publish), "x-raw-publish")
		b.ReportMetric(float64(per)/float64(roundTrip), "x-pg-roundtrip")
	})
	b.Run("rename", func(b *testing.B) {
		alice := token(b, "alice", "w1")
		env := s.call("POST", "/api/data/holidays", alice, `{"reason":"r","type":"global","dateFrom":"2027-01-01","dateTo":"2027-01-01"}`).want(b, 200)
		var h struct{ ID string }
		env.decode(b, &h)
		publish, roundTrip := baselines(b, s, max(b.N, 100))
		b.ResetTimer()
		start := time.Now()
		for i := range b.N {
			do(b, s, "PUT", "/api/data/holidays/"+h.ID, alice, `{"reason":"r`+strconv.Itoa(i)+`"}`)
		}
		per := time.Since(start) / time.Duration(b.N)
		b.ReportMetric(float64(per)/float64(publish), "x-raw-publish")
		b.ReportMetric(float64(per)/float64(roundTrip), "x-pg-roundtrip")
	})
}

// BenchmarkMemory: the resident memory of the astro program, with its
// embedded JetStream server as `go run ./cmd/astro` runs it (PostgreSQL
// runs apart), after 1,000,000 notifications were sent to 10,000 users,
// 100 each, and each user's count and first page were read once. It builds
// the program and runs it as a process of its own, so that its figure is
// the program's alone. It takes minutes, so run it alone:
//
//	go test -run '^$' -bench Memory -benchtime 1x ./cmd/astro
func BenchmarkMemory(b *testing.B) {
	const users, each, workers = 10_000, 100, 32
	p := startProgram(b, workers)
	base, client := p.base, p.client
	request := func(method, path, tok, body string) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := client.Do(req)
		if err != nil {
			b.Error(err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Errorf("%s %s: HTTP %d", method, path, resp.StatusCode)
		}
	}
	svc := sender(b, "w1")
	tokens := make([]string, users)
	for u := range users {
		tokens[u] = token(b, fmt.Sprint("user-", u), "w1")
	}
	for range b.N {
		start := time.Now()
		parallel(b, workers, users*each, func(i int) {
			request("POST", sendPath, svc, fmt.Sprintf(`{"recipientId":"user-%d","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"task","subject":"Task %d","message":"You have a new task"}`, i%users, i))
		})
		b.Logf("%d sends in %s", users*each, time.Since(start).Round(time.Second))
		parallel(b, workers, users, func(u int) {
			request("GET", "/api/data/notifications/unreadcount", tokens[u], "")
			request("GET", "/api/data/notifications", tokens[u], "")
		})
	}
	b.ReportMetric(p.memoryKB(b, "VmHWM")/1024, "peak-RSS-MB")
	b.ReportMetric(p.memoryKB(b, "VmRSS")/1024, "RSS-MB")
}

// program is the astro program built and running as a process of its own,
// with its embedded JetStream server as `go run ./cmd/astro` runs it, so
// that a benchmark's memory figures are the program's alone.
type program struct {
	base   string
	client *http.Client
	pid    int
	logs   *syncBuffer
}

// startProgram builds the program, starts it on the test PostgreSQL with
// the extra settings env, and waits until it is ready; it is stopped with
// SIGTERM when b ends.
func startProgram(b *testing.B, workers int, env ...string) *program {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "astro")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	port := freePort(b)
	cmd := exec.Command(bin)
	cmd.Env = append(append(os.Environ(),
		"ASTRO_HTTP_ADDR=127.0.0.1:"+port, "ASTRO_DATA_DIR="+b.TempDir(), "ASTRO_DATABASE_URL="+pgtest.URL(b),
		"ASTRO_JWT_SECRET="+testSecret, "ASTRO_NATS_LISTEN=off", "ASTRO_RATE_LIMIT=off", "ASTRO_LOG_LEVEL=warn"), env...)
	p := &program{base: "http://127.0.0.1:" + port, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}}, logs: &syncBuffer{}}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p.pid = cmd.Process.Pid
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	waitFor(b, 60*time.Second, func() error {
		resp, err := p.client.Get(p.base + "/readyz")
		if err != nil {
			return fmt.Errorf("astro not ready: %v\n%s", err, p.logs.String())
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("astro not ready: /readyz %d\n%s", resp.StatusCode, p.logs.String())
		}
		return nil
	})
	return p
}

// memoryKB is the program's memory as field of /proc/PID/status says it, in
// kB: VmRSS now, VmHWM at its peak.
func (p *program) memoryKB(b *testing.B, field string) float64 {
	b.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			var kb float64
			fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), &kb)
			return kb
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, p.pid)
	return 0
}

func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// parallel runs op(0) to op(n-1) on workers goroutines, each taking the
// next i, and stops handing out work once b has failed.
func parallel(b *testing.B, workers, n int, op func(i int)) {
	var wg sync.WaitGroup
	var next atomic.Int64
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n && !b.Failed(); i = int(next.Add(1) - 1) {
				op(i)
			}
		}()
	}
	wg.Wait()
}
