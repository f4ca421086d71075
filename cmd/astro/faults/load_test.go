//go:build faults

package faults

// The load client of the fault suite: a few workers send a sustained mix of
// writes and reads, and a ledger records every write and how it ended.
//
// Every write carries an Idempotency-Key unique to it and is retried with
// the same key and the same body on network errors, timeouts, 409 (a
// request with that key still in progress, or a lost race), 429 and 5xx,
// until it is answered otherwise or its deadline passes: that is how a
// real client gets exactly-once.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"astro/api/auth"
)

// Kinds of write. The first five each ask for exactly one event that names
// the command (a unique marker, or for a delete the notification id) when
// they are acknowledged.
const (
	kSend       = "send"          // POST /notifications; marker in subject
	kProbe      = "probe"         // a send that measures recovery
	kHoliday    = "holidayCreate" // POST /holidays; marker in reason
	kRename     = "rename"        // PUT /holidays/{id}; marker in the new reason
	kResource   = "resource"      // PUT /resources/{id}; marker in name
	kDelete     = "delete"        // DELETE /notifications/delete/{id}
	kMarkRead   = "markread"
	kMarkUnread = "markunread"
	kMarkAll    = "markallread"
	kDeleteAll  = "deleteall"
)

// markerKinds produce exactly one event carrying the command's marker.
var markerKinds = []string{kSend, kProbe, kHoliday, kRename, kResource}

type outcome int

const (
	cmdPending  outcome = iota
	cmdAcked            // 2xx
	cmdRejected         // answered with a final 4xx
	cmdGaveUp           // no final answer before the deadline
)

func (o outcome) String() string {
	return [...]string{"pending", "acked", "rejected", "gave up"}[o]
}

// command is one write as the client saw it.
type command struct {
	N      int
	Kind   string
	User   string // who calls
	Target string // recipient (sends), notification, holiday or resource id
	Marker string
	Key    string // Idempotency-Key
	Method string
	Path   string
	Body   []byte

	Start, End time.Time
	Attempts   int
	// Transport counts attempts with no HTTP answer. Even "connection
	// refused" may follow an attempt that reached a process since killed:
	// the HTTP transport resends a request carrying an Idempotency-Key on a
	// fresh connection when a reused one dies under it.
	Transport  int
	InProgress int // attempts answered 409 "still in progress" (idempotency claim held)
	Replayed   int // answers marked Idempotent-Replayed
	Outcome    outcome
	Status     int    // last HTTP status, 0 if none
	Answer     string // body of a final non-2xx answer, or the last error
	RespID     string // the id the answer carried (sent notification, created holiday)
}

// loadClient drives the service at one fixed address.
type loadClient struct {
	base    string
	ws      string
	prefix  string // of markers, unique per scenario
	users   []string
	senders []string // hold notifications:send and resources:write
	full    string   // a recipient whose inbox is kept at the 1,000 cap, if any
	// rareDeleteAll sends a tenth of the deleteall share, so that inboxes
	// keep notifications long enough to be checked pending.
	rareDeleteAll bool
	tokens        map[string]string
	http          *http.Client
	deadline      time.Duration // per command

	n       atomic.Int64
	stop    atomic.Bool
	abort   atomic.Bool    // the scenario failed: give up every retry now
	workers sync.WaitGroup // workers and background retries

	mu       sync.Mutex
	ledger   []*command
	inbox    map[string][]string // acknowledged, not knowingly deleted notification ids per user
	holidays []string            // acknowledged holiday ids
	readsOK  int
	readsBad map[string]int // failed reads by status
}

func newClient(t *testing.T, base, ws, prefix string) *loadClient {
	c := &loadClient{
		base: base, ws: ws, prefix: prefix,
		users:    []string{"u0", "u1", "u2", "u3"},
		senders:  []string{"svc0", "svc1", "svc2", "svc3"},
		tokens:   map[string]string{},
		inbox:    map[string][]string{},
		readsBad: map[string]int{},
		deadline: 45 * time.Second, // past the 15 s after which a dead process's idempotency claim is taken over (idempotency.Config.ClaimTimeout), with room to retry after it
		http: &http.Client{
			Timeout:   15 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second},
		},
	}
	for _, u := range append(slices.Concat(c.users, c.senders), "prober", "probe-inbox") {
		var scopes []string
		if slices.Contains(c.senders, u) || u == "prober" {
			scopes = []string{"notifications:send", "resources:write"}
		}
		tok, err := auth.Sign([]byte(secret), auth.Claims{UserID: u, WorkspaceID: ws, Scopes: scopes}, time.Now(), 2*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		c.tokens[u] = tok
	}
	return c
}

// newCommand registers a write in the ledger.
func (c *loadClient) newCommand(kind, user, target, method, path string, body func(marker string) any) *command {
	n := int(c.n.Add(1))
	cmd := &command{N: n, Kind: kind, User: user, Target: target, Method: method, Path: path,
		Key: fmt.Sprintf("%s-key-%06d", c.prefix, n)}
	if body != nil {
		cmd.Marker = fmt.Sprintf("%s-%06d", c.prefix, n)
		b, _ := json.Marshal(body(cmd.Marker))
		cmd.Body = b
	}
	c.mu.Lock()
	c.ledger = append(c.ledger, cmd)
	c.mu.Unlock()
	return cmd
}

// attempt sends cmd once and reports whether it is decided.
func (c *loadClient) attempt(cmd *command, hc *http.Client) bool {
	cmd.Attempts++
	var rd io.Reader
	if cmd.Body != nil {
		rd = bytes.NewReader(cmd.Body)
	}
	req, err := http.NewRequest(cmd.Method, c.base+cmd.Path, rd)
	if err != nil {
		panic(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.tokens[cmd.User])
	req.Header.Set("Idempotency-Key", cmd.Key)
	if cmd.Body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		cmd.Status, cmd.Answer = 0, err.Error()
		cmd.Transport++
		return false
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	cmd.Status = resp.StatusCode
	if resp.Header.Get("Idempotent-Replayed") == "true" {
		cmd.Replayed++
	}
	if err != nil {
		cmd.Answer = "read body: " + err.Error()
		return false
	}
	switch s := resp.StatusCode; {
	case s >= 200 && s < 300:
		var env struct {
			Data struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		_ = json.Unmarshal(raw, &env)
		cmd.RespID, cmd.Outcome, cmd.Answer = env.Data.ID, cmdAcked, ""
		return true
	case s >= 500, s == http.StatusTooManyRequests, s == http.StatusConflict:
		cmd.Answer = truncate(string(raw), 300)
		if s == http.StatusConflict && strings.Contains(cmd.Answer, "in progress") {
			cmd.InProgress++
		}
		return false
	default:
		cmd.Outcome, cmd.Answer = cmdRejected, truncate(string(raw), 300)
		return true
	}
}

// uuidOf is the UUID that stands for the sender or resource called name:
// the API names users and resources by UUID.
func uuidOf(name string) string {
	return fmt.Sprintf("%08x-0000-4000-8000-000000000000", crc32.ChecksumIEEE([]byte(name)))
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// backoff is the pause before retry number attempt (1-based), with jitter.
func backoff(attempt int) time.Duration {
	d := 50 * time.Millisecond << min(attempt, 5)
	d = min(d, time.Second)
	return d/2 + rand.N(d/2+1)
}

// run sends cmd; a write that needs retrying is handed to a goroutine of
// its own so that the worker goes on sending, as many clients would.
func (c *loadClient) run(cmd *command) {
	cmd.Start = time.Now()
	if c.attempt(cmd, c.http) {
		c.finish(cmd)
		return
	}
	c.workers.Add(1)
	go func() {
		defer c.workers.Done()
		c.retry(cmd, c.http)
	}()
	// A client whose request failed slows down a little before its next.
	time.Sleep(backoff(1))
}

// runSync sends cmd and retries it until it is decided.
func (c *loadClient) runSync(cmd *command, hc *http.Client) {
	cmd.Start = time.Now()
	if !c.attempt(cmd, hc) {
		c.retry(cmd, hc)
		return
	}
	c.finish(cmd)
}

func (c *loadClient) retry(cmd *command, hc *http.Client) {
	for {
		time.Sleep(backoff(cmd.Attempts))
		if c.attempt(cmd, hc) {
			c.finish(cmd)
			return
		}
		if time.Since(cmd.Start) > c.deadline || c.abort.Load() {
			cmd.Outcome = cmdGaveUp
			c.finish(cmd)
			return
		}
	}
}

// finish records what a decided command means for later commands.
func (c *loadClient) finish(cmd *command) {
	cmd.End = time.Now()
	if cmd.Outcome != cmdAcked {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch cmd.Kind {
	case kSend:
		if cmd.RespID != "" {
			c.inbox[cmd.Target] = append(c.inbox[cmd.Target], cmd.RespID)
		}
	case kHoliday:
		if cmd.RespID != "" {
			c.holidays = append(c.holidays, cmd.RespID)
		}
	case kDeleteAll:
		c.inbox[cmd.User] = nil
	}
}

// pickNotification returns a known notification of user, removing it from
// the known set when take is set (a delete).
func (c *loadClient) pickNotification(rng *rand.Rand, user string, take bool) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := c.inbox[user]
	if len(ids) == 0 {
		return "", false
	}
	i := rng.IntN(len(ids))
	id := ids[i]
	if take {
		ids[i] = ids[len(ids)-1]
		c.inbox[user] = ids[:len(ids)-1]
	}
	return id, true
}

func (c *loadClient) pickHoliday(rng *rand.Rand) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.holidays) == 0 {
		return "", false
	}
	return c.holidays[rng.IntN(len(c.holidays))], true
}

// send builds a notification send to recipient.
func (c *loadClient) send(kind, caller, recipient string) *command {
	return c.newCommand(kind, caller, recipient, "POST", "/api/data/notifications", func(m string) any {
		return map[string]any{"recipientId": recipient, "senderId": uuidOf(caller), "notificationType": "load.test",
			"subject": "load " + m, "message": "fault suite", "data": map[string]any{"taskName": m}}
	})
}

// step sends one operation of the mix.
func (c *loadClient) step(rng *rand.Rand) {
	user := c.users[rng.IntN(len(c.users))]
	sender := c.senders[rng.IntN(len(c.senders))]
	const base = "/api/data/notifications"
	switch p := rng.IntN(100); {
	case p < 30:
		if c.full != "" && rng.IntN(3) == 0 {
			user = c.full // at the cap: each send also deletes the oldest
		}
		c.run(c.send(kSend, sender, user))
	case p < 45:
		c.read(rng, user)
	case p < 53:
		if id, ok := c.pickNotification(rng, user, false); ok {
			c.run(c.newCommand(kMarkRead, user, id, "POST", base+"/"+id+"/markread", nil))
		}
	case p < 58:
		if id, ok := c.pickNotification(rng, user, false); ok {
			c.run(c.newCommand(kMarkUnread, user, id, "POST", base+"/"+id+"/markunread", nil))
		}
	case p < 68:
		if id, ok := c.pickNotification(rng, user, true); ok {
			c.run(c.newCommand(kDelete, user, id, "DELETE", base+"/delete/"+id, nil))
		}
	case p < 71:
		c.run(c.newCommand(kMarkAll, user, user, "POST", base+"/markallread", nil))
	case p < 72:
		if c.rareDeleteAll && rng.IntN(10) != 0 {
			c.read(rng, user)
			break
		}
		c.run(c.newCommand(kDeleteAll, user, user, "DELETE", base+"/deleteall", nil))
	case p < 82:
		c.run(c.newCommand(kHoliday, user, "", "POST", "/api/data/holidays", func(m string) any {
			day := fmt.Sprintf("2027-%02d-%02d", 1+rng.IntN(12), 1+rng.IntN(28))
			switch rng.IntN(3) {
			case 0:
				return map[string]any{"reason": "hol " + m, "type": "global", "dateFrom": day, "dateTo": day}
			case 1:
				return map[string]any{"reason": "hol " + m, "type": "country", "dateFrom": day, "dateTo": day, "countryId": []string{"GB"}}
			default:
				return map[string]any{"reason": "hol " + m, "type": "people", "dateFrom": day, "dateTo": day, "resources": []string{uuidOf("r0"), uuidOf("r1")}}
			}
		}))
	case p < 93:
		if id, ok := c.pickHoliday(rng); ok {
			c.run(c.newCommand(kRename, user, id, "PUT", "/api/data/holidays/"+id, func(m string) any {
				return map[string]any{"reason": "ren " + m}
			}))
		}
	default:
		r := uuidOf(fmt.Sprintf("r%d", rng.IntN(5)))
		c.run(c.newCommand(kResource, sender, r, "PUT", "/api/data/resources/"+r, func(m string) any {
			return map[string]any{"name": "res " + m, "countryCode": []string{"GB", "DE", "FR"}[rng.IntN(3)], "isActive": true, "isGuest": false}
		}))
	}
}

// read sends one query; reads are counted, not retried.
func (c *loadClient) read(rng *rand.Rand, user string) {
	path := "/api/data/notifications?asFlatList=true"
	switch rng.IntN(4) {
	case 1:
		path = "/api/data/notifications/unreadcount"
	case 2:
		path = "/api/data/holidays/global?$top=20"
	case 3:
		if id, ok := c.pickHoliday(rng); ok {
			path = "/api/data/holidays/" + id
		}
	}
	req, _ := http.NewRequest("GET", c.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+c.tokens[user])
	status := "no answer"
	if resp, err := c.http.Do(req); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		status = fmt.Sprint(resp.StatusCode)
	}
	c.mu.Lock()
	if status == "200" {
		c.readsOK++
	} else {
		c.readsBad[status]++
	}
	c.mu.Unlock()
}

// fillInbox sends n notifications to recipient with a few concurrent
// senders, each retried until decided.
func (c *loadClient) fillInbox(recipient string, n int) {
	var wg sync.WaitGroup
	var next atomic.Int64
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				c.runSync(c.send(kSend, c.senders[i%len(c.senders)], recipient), c.http)
			}
		}()
	}
	wg.Wait()
}

// startWorkers runs n workers until stopLoad.
func (c *loadClient) startWorkers(n int) {
	for i := range n {
		c.workers.Add(1)
		go func() {
			defer c.workers.Done()
			rng := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
			for !c.stop.Load() {
				c.step(rng)
			}
		}()
	}
}

// stopLoad stops the workers and waits for every retry to be decided.
func (c *loadClient) stopLoad() {
	c.stop.Store(true)
	c.workers.Wait()
}

var probeWriteHTTP = &http.Client{Timeout: 5 * time.Second}

// probeWrite sends a notification and retries it until acknowledged: the
// "a write succeeds" half of recovery.
func (c *loadClient) probeWrite() *command {
	cmd := c.send(kProbe, "prober", "probe-inbox")
	c.runSync(cmd, probeWriteHTTP)
	return cmd
}

// visible waits until the probe notification id is listed in the probe
// inbox, that is, until the read model reflects the write.
func (c *loadClient) visible(id string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest("GET", c.base+"/api/data/notifications?asFlatList=true", nil)
		req.Header.Set("Authorization", "Bearer "+c.tokens["probe-inbox"])
		if resp, err := probeWriteHTTP.Do(req); err == nil {
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && bytes.Contains(raw, []byte(`"`+id+`"`)) {
				return true
			}
		}
		time.Sleep(25 * time.Millisecond) // polling the read model, bounded by the deadline
	}
	return false
}

// commands returns the ledger; call it after stopLoad.
func (c *loadClient) commands() []*command {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.ledger)
}

// summarize counts the ledger's outcomes.
func summarize(cmds []*command) (sent, ack, rej, gave int, byKind map[string][4]int) {
	byKind = map[string][4]int{}
	for _, c := range cmds {
		sent++
		k := byKind[c.Kind]
		k[c.Outcome]++
		byKind[c.Kind] = k
		switch c.Outcome {
		case cmdAcked:
			ack++
		case cmdRejected:
			rej++
		case cmdGaveUp:
			gave++
		}
	}
	return
}

func kindCounts(byKind map[string][4]int) string {
	var parts []string
	for _, k := range []string{kSend, kProbe, kHoliday, kRename, kResource, kDelete, kMarkRead, kMarkUnread, kMarkAll, kDeleteAll} {
		v := byKind[k]
		if v == [4]int{} {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %d/%d/%d/%d", k, v[cmdAcked]+v[cmdRejected]+v[cmdGaveUp]+v[cmdPending], v[cmdAcked], v[cmdRejected], v[cmdGaveUp]))
	}
	return "per kind sent/acked/rejected/gave up: " + strings.Join(parts, ", ")
}
