//go:build faults && linux

package faults

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"astro/api/auth"
)

// TestFaultsDiskFull fills the disk under the embedded log of a running
// service, on the default setup, by capping the size of every file the
// service's process writes at one byte (RLIMIT_FSIZE, set from outside:
// EFBIG where a full disk gives ENOSPC, and nats-server's store takes both
// for a failed write). Writes must answer 503 with Retry-After, /readyz
// must say why, and once the cap is lifted the service must take writes
// again on its own, without a restart, with every write it acknowledged in
// the read model.
func TestFaultsDiskFull(t *testing.T) {
	bins := buildBinaries(t, t.TempDir())
	pg := startPG(t)
	s := newAstro(bins.astro, t.TempDir(), freePort(t), map[string]string{
		"ASTRO_DATABASE_URL": pg.createDB(t, "svc_diskfull"),
		"ASTRO_RATE_LIMIT":   "off",
	})
	startReady(t, s)
	sign := func(user string, scopes ...string) string {
		tok, err := auth.Sign([]byte(secret), auth.Claims{UserID: user, WorkspaceID: "acme", Scopes: scopes}, time.Now(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	svc, alice := sign("svc", "notifications:send"), sign("alice")
	hc := &http.Client{Timeout: 30 * time.Second}
	call := func(method, path, tok string, body any) (int, http.Header, []byte) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, s.base+path, rd)
		req.Header.Set("Content-Type", "application/json")
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, raw
	}
	sends := 0
	send := func() (int, http.Header) {
		sends++
		status, h, _ := call("POST", "/api/data/notifications", svc, map[string]any{
			"recipientId": "alice", "senderId": "00005fc0-0000-4000-8000-000000000002", "notificationType": "load",
			"subject": "s", "message": fmt.Sprintf("send %d", sends),
		})
		return status, h
	}
	acked := 0
	for range 5 {
		if status, _ := send(); status != http.StatusOK {
			t.Fatalf("a send before the disk filled answered %d", status)
		}
		acked++
	}

	pid := s.cmd.Process.Pid
	var was unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: 1, Max: unix.RLIM_INFINITY}, &was); err != nil {
		t.Fatalf("fill the service's disk: %v", err)
	}
	freed := false
	free := func() {
		if !freed {
			freed = true
			if err := unix.Prlimit(pid, unix.RLIMIT_FSIZE, &was, nil); err != nil {
				t.Fatalf("free the service's disk: %v", err)
			}
		}
	}
	t.Cleanup(free)

	failSend := func() {
		t.Helper()
		status, h := send()
		if status != http.StatusServiceUnavailable || h.Get("Retry-After") == "" {
			t.Fatalf("a send on a full disk answered %d, Retry-After %q; want 503 with it", status, h.Get("Retry-After"))
		}
	}
	failSend()
	// The service restarts its NATS server every few seconds, which a full
	// disk fails again at the next write: until /readyz says why, writes
	// go on failing.
	deadline := time.Now().Add(60 * time.Second)
	for {
		status, _, raw := call("GET", "/readyz", "", nil)
		if status == http.StatusServiceUnavailable && strings.Contains(string(raw), "disk full") {
			t.Logf("/readyz on a full disk: %s", raw)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still answers %d a minute into a full disk: %s", status, raw)
		}
		failSend()
	}

	free()
	freedAt := time.Now()
	if err := s.waitReady(60 * time.Second); err != nil {
		t.Fatalf("%v after the disk was freed; service log ends:\n%s", err, s.logTail(40))
	}
	if status, _ := send(); status != http.StatusOK {
		t.Fatalf("a send after the disk was freed answered %d; service log ends:\n%s", status, s.logTail(40))
	}
	acked++
	t.Logf("ready and writing %v after the disk was freed", time.Since(freedAt).Round(time.Millisecond))

	// A send that answered 503 may or may not have happened (README,
	// Guarantees); every acknowledged one is there.
	status, _, raw := call("GET", "/api/data/notifications/unreadcount", alice, nil)
	var count struct {
		Data struct {
			UnreadCount int `json:"unreadCount"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &count); status != http.StatusOK || err != nil {
		t.Fatalf("unread count: %d %v: %s", status, err, raw)
	}
	if n := count.Data.UnreadCount; n < acked || n > sends {
		t.Fatalf("unread %d after the disk was freed, want the %d sends acknowledged and at most the %d made", n, acked, sends)
	}
	if !s.running() {
		t.Fatalf("the service exited; log ends:\n%s", s.logTail(40))
	}
}
