//go:build faults

package faults

// The compaction scenario: the service compacts inboxes all the time while
// the load runs and is killed with kill -9, several times, the moment a
// compaction begins. Compaction removes from the log the events commands
// appended for an inbox, so its checks are about the inboxes' state: nothing
// pending is lost, nothing deleted returns, no erasure is left unfinished
// after a restart, and the read models equal a rebuild from the compacted log.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"astro/commands/notifications"
	"astro/events"
)

// compactionOff is how the service runs when a scenario is not about
// compaction: no inbox ever has that many events, none is that old.
var compactionOff = map[string]string{"ASTRO_COMPACT_EVERY": "100000000", "ASTRO_ERASE_WITHIN": "100000h"}

// erasuresBucket is the ledger of erasures begun and not finished
// (natslog.Config.PendingBucket).
const erasuresBucket = "ASTRO_ERASURES"

// compactionResult is what the compaction scenario saw.
type compactionResult struct {
	every string // ASTRO_COMPACT_EVERY

	kills       int // kill -9 of the service
	midway      int // ... that found an erasure begun and not finished in the ledger
	appended    int // ... of which the compaction was in the log, its erasure not done
	compactions int // "inbox compacted", from the service's log
	finished    int // erasures a restart finished ("finished an inbox erasure a stop had cut short")
	failures    int // "compaction failed" warnings
	inLog       int // InboxCompacted events left in the final log
	ledgerLeft  int // ledger entries left after the final restart
	unerased    int // events left before their inbox's last compaction

	pending, gone     int // notifications checked pending, and checked gone
	missing, returned int // pending ones not pending; gone ones back
	apiDiffers        int // inboxes whose API listing differs from the log's state
	problems          int
}

func (c *compactionResult) String() string {
	return fmt.Sprintf("%d compactions (%d failed), %d InboxCompacted events in the final log; %d kill -9, %d with an erasure begun and not finished "+
		"(%d after the compaction's append), %d erasures finished by a restart, %d ledger entries left after the final restart; "+
		"%d events left before their inbox's compaction; %d notifications checked pending (%d lost), %d checked deleted (%d returned), %d inboxes whose API listing differs from the log",
		c.compactions, c.failures, c.inLog, c.kills, c.midway, c.appended, c.finished, c.ledgerLeft, c.unerased, c.pending, c.missing, c.gone, c.returned, c.apiDiffers)
}

// row is the scenario's line under its row of the table.
func (c *compactionResult) row() string {
	return fmt.Sprintf("compactions %d (failed %d), kills %d (mid-compaction %d, after append %d), finished at restart %d, ledger left %d, unerased %d; pending %d/lost %d, deleted %d/returned %d, api≠log %d",
		c.compactions, c.failures, c.kills, c.midway, c.appended, c.finished, c.ledgerLeft, c.unerased, c.pending, c.missing, c.gone, c.returned, c.apiDiffers)
}

func (c *compactionResult) failed() bool { return c != nil && c.problems > 0 }

// compactionScenario runs compaction constantly (an inbox is compacted every
// 20 events, and every inbox every 5 s: its oldest event is then older than
// half of ERASE_WITHIN; rounds every second) and kills the service the
// moment a compaction begins.
func compactionScenario() scenario {
	return scenario{
		id: "compaction", title: "svc kill -9 mid-compaction", natsNodes: 1, compaction: true, load: 16 * time.Second,
		env: map[string]string{"ASTRO_COMPACT_EVERY": "20", "ASTRO_ERASE_WITHIN": "10s", "ASTRO_LOG_LEVEL": "debug"},
		inject: func(fx *scenarioCtx) {
			for i, at := range []time.Duration{2 * time.Second, 4500 * time.Millisecond, 7 * time.Second, 9500 * time.Millisecond, 12 * time.Second, 14 * time.Second} {
				fx.at(at)
				fx.killMidCompaction(natsURLs(fx.nodes), 3*time.Second, i%2 == 1)
				t0 := time.Now()
				if err := fx.svc.start(); err != nil {
					fx.t.Fatalf("restart the service: %v", err)
				}
				fx.recovered(fmt.Sprintf("kill -9 #%d", i+1), t0)
			}
		},
	}
}

// killMidCompaction kills the service with kill -9 as soon as an erasure
// is recorded in the ledger (a compaction's first step), or with
// afterAppend as soon as an InboxCompacted is published (its second), or
// after wait, and records where the kill landed.
func (fx *scenarioCtx) killMidCompaction(urls string, wait time.Duration, afterAppend bool) {
	c := fx.res.comp
	ctx, cancel := context.WithTimeout(context.Background(), wait+10*time.Second)
	defer cancel()
	nc, err := nats.Connect(urls, nats.Timeout(5*time.Second))
	if err != nil {
		fx.t.Errorf("compaction: connect to NATS: %v", err)
		fx.svc.kill()
		c.kills++
		return
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctx, erasuresBucket)
	if err == nil && afterAppend {
		var sub *nats.Subscription
		if sub, err = nc.SubscribeSync(fmt.Sprintf("astro.events.%s.inbox.*", fx.lc.ws)); err == nil {
			for end := time.Now().Add(wait); time.Now().Before(end); {
				m, err := sub.NextMsg(time.Until(end))
				if err == nil && m.Header.Get("ce-type") == (events.InboxCompacted{}).EventType() {
					break
				}
			}
			sub.Unsubscribe()
		}
	} else if err == nil {
		var w jetstream.KeyWatcher
		if w, err = kv.WatchAll(ctx, jetstream.UpdatesOnly()); err == nil {
			timeout := time.After(wait)
		watch:
			for {
				select {
				case e := <-w.Updates():
					if e != nil && e.Operation() == jetstream.KeyValuePut {
						break watch
					}
				case <-timeout:
					break watch
				}
			}
			w.Stop()
		}
	}
	fx.svc.kill()
	c.kills++
	if err != nil {
		fx.t.Errorf("compaction: watch the ledger %s: %v", erasuresBucket, err)
		return
	}
	subjects, err := ledgerKeys(ctx, kv)
	if err != nil {
		fx.t.Errorf("compaction: read the ledger: %v", err)
		return
	}
	if len(subjects) == 0 {
		return
	}
	c.midway++
	for _, s := range subjects {
		types, err := subjectTypes(ctx, js, s)
		if err != nil {
			fx.t.Errorf("compaction: read %s: %v", s, err)
			return
		}
		last := -1
		for i, t := range types {
			if t == (events.InboxCompacted{}).EventType() {
				last = i
			}
		}
		if last > 0 {
			c.appended++
			break
		}
	}
}

// ledgerKeys lists the erasures begun and not finished.
func ledgerKeys(ctx context.Context, kv jetstream.KeyValue) ([]string, error) {
	l, err := kv.ListKeys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for k := range l.Keys() {
		out = append(out, k)
	}
	return out, nil
}

// subjectTypes lists the event types the inbox stream holds on subject.
func subjectTypes(ctx context.Context, js jetstream.JetStream, subject string) ([]string, error) {
	st, err := js.Stream(ctx, inboxStream)
	if err != nil {
		return nil, err
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}, HeadersOnly: true})
	if err != nil {
		return nil, err
	}
	if cons.CachedInfo().NumPending == 0 {
		return nil, nil
	}
	var out []string
	for {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return out, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			out = append(out, m.Headers().Get("ce-type"))
			if meta, err := m.Metadata(); err == nil && meta.NumPending == 0 {
				return out, nil
			}
		}
		if err := batch.Error(); err != nil {
			return out, err
		}
		if n == 0 {
			return out, nil
		}
	}
}

// settle lets the service compact what the load left, kills it once more
// mid-compaction, restarts it with compaction off, and checks that the
// restart finished every erasure the ledger holds.
func (c *compactionResult) settle(fx *scenarioCtx, urls string) {
	t := fx.t
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Every inbox of the load compacted since its last command: its last
	// event an InboxCompacted. Every inbox is compacted within about half
	// of ERASE_WITHIN and a poll.
	deadline := time.Now().Add(60 * time.Second)
	for {
		log, err := readLog(ctx, urls)
		if err != nil {
			t.Errorf("compaction: read the log: %v", err)
			break
		}
		last := map[string]string{}
		for _, e := range log {
			if e.Aggregate.Kind == events.KindInbox {
				last[e.Aggregate.ID] = e.Type
			}
		}
		var waiting []string
		for user, typ := range last {
			if typ != (events.InboxCompacted{}).EventType() {
				waiting = append(waiting, user)
			}
		}
		if len(waiting) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("compaction: inboxes %v were not compacted within 60s of the load's end", waiting)
			c.problems++
			break
		}
		time.Sleep(500 * time.Millisecond) // waiting for the compactor's rounds, bounded by the deadline
	}
	// A last kill -9 mid-compaction, and a restart that must finish it.
	fx.killMidCompaction(urls, 5*time.Second, true)
	for k, v := range compactionOff {
		fx.svc.env = append(fx.svc.env, k+"="+v) // the last of a duplicated key wins
	}
	t0 := time.Now()
	if err := fx.svc.start(); err != nil {
		t.Fatalf("restart the service: %v", err)
	}
	fx.recovered("kill -9 #"+fmt.Sprint(c.kills)+", restarted with compaction off", t0)
	nc, err := nats.Connect(urls, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("compaction: connect to NATS: %v", err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctx, erasuresBucket)
	if err != nil {
		t.Fatalf("compaction: the ledger %s: %v", erasuresBucket, err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		keys, err := ledgerKeys(ctx, kv)
		if err == nil && len(keys) == 0 {
			break
		}
		if time.Now().After(deadline) {
			c.ledgerLeft = len(keys)
			c.problems++
			t.Errorf("compaction: erasures left unfinished 30s after the final restart: %v (err %v)", keys, err)
			break
		}
		time.Sleep(100 * time.Millisecond) // waiting for the restart's FinishAll, bounded by the deadline
	}
	b, _ := os.ReadFile(fx.svc.logPath)
	c.compactions = bytes.Count(b, []byte(`msg="inbox compacted"`))
	c.finished = bytes.Count(b, []byte(`msg="finished an inbox erasure a stop had cut short"`))
	c.failures = bytes.Count(b, []byte(`msg="compaction failed; the inbox stays due"`))
}

// listed is one notification as the API lists it.
type listed struct {
	ID       string     `json:"id"`
	ReadDate *time.Time `json:"readDate"`
}

// listAll lists every notification of user through the API, page by page.
func (c *loadClient) listAll(user string) ([]listed, error) {
	var all []listed
	last := ""
	for {
		path := "/api/data/notifications?asFlatList=true"
		if last != "" {
			path += "&lastId=" + url.QueryEscape(last)
		}
		req, _ := http.NewRequest("GET", c.base+path, nil)
		req.Header.Set("Authorization", "Bearer "+c.tokens[user])
		resp, err := c.http.Do(req)
		if err != nil {
			return nil, err
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET %s: HTTP %d %s", path, resp.StatusCode, truncate(string(raw), 300))
		}
		var env struct {
			Data struct {
				Items []listed `json:"items"`
			} `json:"data"`
		}
		if err := json.Unmarshal(raw, &env); err != nil {
			return nil, fmt.Errorf("GET %s: %v", path, err)
		}
		if len(env.Data.Items) == 0 {
			return all, nil
		}
		all = append(all, env.Data.Items...)
		last = env.Data.Items[len(env.Data.Items)-1].ID
	}
}

// checkPending holds each inbox, as the log folds it and as the API lists
// it, to what the load was told: every acknowledged send that no command
// removed (or may have removed) is pending, and no notification whose
// removal was acknowledged is.
func (c *compactionResult) checkPending(fx *scenarioCtx, log []events.Event, cmds []*command) []string {
	var bad []string
	report := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	lc := fx.lc

	folded := map[string]*notifications.Inbox{}
	for _, e := range log {
		if e.WorkspaceID != lc.ws || e.Aggregate.Kind != events.KindInbox {
			continue
		}
		in := folded[e.Aggregate.ID]
		if in == nil {
			in = notifications.NewInbox()
			folded[e.Aggregate.ID] = in
		}
		if err := in.Apply(e); err != nil {
			report("inbox %s does not fold at seq %d: %v", e.Aggregate.ID, e.Seq, err)
		}
		if e.Type == (events.InboxCompacted{}).EventType() {
			c.inLog++
		}
	}
	if c.inLog == 0 {
		report("not compacted: no InboxCompacted event in the log")
	}
	// Every compaction finished: no event of an inbox precedes its last
	// complete compaction (that would keep deleted content in the log).
	type span struct {
		first      uint64 // the last complete compaction's part 1
		part1, cur uint64
		id         string
		seqs       []uint64
	}
	spans := map[string]*span{}
	for _, e := range log {
		if e.WorkspaceID != lc.ws || e.Aggregate.Kind != events.KindInbox {
			continue
		}
		sp := spans[e.Aggregate.ID]
		if sp == nil {
			sp = &span{}
			spans[e.Aggregate.ID] = sp
		}
		sp.seqs = append(sp.seqs, e.Seq)
		if e.Type != (events.InboxCompacted{}).EventType() {
			continue
		}
		p, err := events.Decode(e)
		if err != nil {
			continue
		}
		part := p.(*events.InboxCompacted)
		if part.Part == 1 {
			sp.part1, sp.id = e.Seq, part.CompactionID
		}
		if part.CompactionID == sp.id && part.Part == part.Parts {
			sp.first = sp.part1
		}
	}
	for user, sp := range spans {
		if n := len(slices.DeleteFunc(sp.seqs, func(seq uint64) bool { return seq >= sp.first })); sp.first > 0 && n > 0 {
			c.unerased += n
			report("not erased: %d events of the inbox of %s precede its compaction at seq %d", n, user, sp.first)
		}
	}

	var sends, deleteAlls []*command
	deleted, targeted := map[string]*command{}, map[string]bool{}
	for _, cmd := range cmds {
		switch cmd.Kind {
		case kSend, kProbe:
			if cmd.Outcome == cmdAcked && cmd.RespID != "" {
				sends = append(sends, cmd)
			}
		case kDelete:
			targeted[cmd.Target] = true
			if cmd.Outcome == cmdAcked {
				deleted[cmd.Target] = cmd
			}
		case kDeleteAll:
			if cmd.Outcome != cmdRejected {
				deleteAlls = append(deleteAlls, cmd)
			}
		}
	}
	mustPending, mustGone := map[string][]string{}, map[string]map[string]string{} // user → ids; user → id → why
	gone := func(user, id, why string) {
		if mustGone[user] == nil {
			mustGone[user] = map[string]string{}
		}
		mustGone[user][id] = why
	}
	for _, s := range sends {
		user, id := s.Target, s.RespID
		if d := deleted[id]; d != nil {
			gone(user, id, fmt.Sprintf("delete #%d acknowledged", d.N))
			continue
		}
		mayBeGone := targeted[id]
		for _, d := range deleteAlls {
			if d.User != user {
				continue
			}
			if d.Outcome == cmdAcked && d.Start.After(s.End) {
				gone(user, id, fmt.Sprintf("deleteall #%d acknowledged, asked after the send's answer", d.N))
				mayBeGone = false
				break
			}
			if !d.End.Before(s.Start) {
				mayBeGone = true // it may have been decided before or after the send
			}
		}
		if _, ok := mustGone[user][id]; !ok && !mayBeGone {
			mustPending[user] = append(mustPending[user], id)
		}
	}

	users := slices.Concat(lc.users, []string{"probe-inbox"})
	for _, user := range users {
		in := folded[user]
		if in == nil {
			in = notifications.NewInbox()
		}
		list, err := lc.listAll(user)
		if err != nil {
			report("list the inbox of %s: %v", user, err)
			c.problems++
			continue
		}
		api := map[string]bool{}
		for _, n := range list {
			api[n.ID] = true
		}
		if in.Len() >= maxPending {
			report("inbox %s reached the cap (%d): overflow deletes make the pending check inexact", user, in.Len())
		}
		differs := len(api) != len(list) || len(list) != in.Len()
		for id := range api {
			if !in.Has(id) {
				differs = true
			}
		}
		if differs {
			c.apiDiffers++
			report("inbox %s: the API lists %d notifications (%d distinct), the log's state has %d pending", user, len(list), len(api), in.Len())
		}
		for _, id := range mustPending[user] {
			c.pending++
			inLog, listed := in.Has(id), api[id]
			if !inLog || !listed {
				c.missing++
				report("lost: notification %s of %s was acknowledged and never deleted; pending in the log's state %v, listed by the API %v", id, user, inLog, listed)
			}
		}
		for id, why := range mustGone[user] {
			c.gone++
			inLog, listed := in.Has(id), api[id]
			if inLog || listed {
				c.returned++
				report("returned: notification %s of %s is deleted (%s); pending in the log's state %v, listed by the API %v", id, user, why, inLog, listed)
			}
		}
	}
	c.problems += len(bad)
	fx.res.lost += c.missing
	return bad
}
