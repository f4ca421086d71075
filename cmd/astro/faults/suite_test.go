//go:build faults

// Package faults is Astro's fault-injection suite: it owns the tests that
// run the service, NATS and PostgreSQL as processes, break them while a
// load runs, and check that no acknowledged write was lost or doubled. It
// has no code outside its tests and runs behind the faults build tag:
//
//	go test -tags faults -run Faults -v ./cmd/astro/faults/
package faults

// TestFaults runs the service as its own process against NATS and
// PostgreSQL as their own processes, drives a sustained mixed write load
// and injects one kind of fault per scenario:
//
//   - kill -9 of the service, several times, restarting it each time;
//   - kill -9 of the NATS server, restarted after a second on its data;
//   - a PostgreSQL restart (fast shutdown, start again on the same port);
//   - a three-node JetStream cluster on loopback with R3 streams, whose
//     stream leader is killed with kill -9 together with the service and
//     stays down; the service restarts at once, while the cluster elects
//     new leaders, and is killed and restarted again once it has;
//   - compaction running all the time (every 20 events of an inbox, and
//     every inbox every 5 s) while the service is killed with kill -9 the
//     moment a compaction begins or appends; that scenario is judged by the
//     inboxes' state, since compaction removes commands' events from the
//     log (compaction_test.go). The others run with compaction off.
//
// Every write carries a unique Idempotency-Key and is retried with it (see
// load_test.go). After each scenario it checks that every
// acknowledged command is in the log exactly once, that no event exists
// that no command asked for (markers, and each aggregate's history replayed
// from the log: an event decided on a wrong state counts as inconsistent),
// that each read model equals a fresh rebuild from the log, and that the
// service recovered with no manual step: /readyz 200, a write acknowledged
// and visible in its read model, no process exiting on its own, no write
// left without a final answer. It prints a table per scenario.
//
// It runs behind the faults build tag, since it takes minutes:
//
//	go test -tags faults -run Faults -v ./cmd/astro/faults/
//
// It needs nothing beyond what the default suite needs (Go, the PostgreSQL
// binaries): the service and nats-server binaries are built from this
// module. A missing piece fails the suite; it never skips.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// workers is how many workers send commands at once.
const workers = 4

// secret signs the suite's tokens; the service gets it as
// ASTRO_JWT_SECRET when the suite starts it.
const secret = "faults-secret-faults-secret-faults-secret-0123"

type scenario struct {
	id, title string
	natsNodes int
	// fullInbox, when set, fills one recipient's inbox to the cap before
	// the load, so that sends to it append an overflow delete as well.
	fullInbox bool
	// compaction, when set, runs the service with compaction on (env
	// below) and judges the inboxes by their state (checkPending) instead
	// of holding every inbox command to its event.
	compaction bool
	env        map[string]string // the service's settings beyond the suite's
	load       time.Duration
	inject     func(fx *scenarioCtx)
}

// recovery is how long the service took to come back after one fault.
type recovery struct {
	what                  string
	ready, write, visible time.Duration // /readyz 200 again; a write acknowledged; the write in its read model
}

type scenarioResult struct {
	title                                       string
	ran                                         bool
	sent, cmdAcked, cmdRejected, cmdGaveUp      int
	retried, ambiguous                          int // acked after >1 attempt; had an attempt with no answer
	lost, dup, unasked, inconsistent, misreport int
	unexpected                                  int
	events                                      int
	readModel                                   string
	recoveries                                  []recovery
	elapsed                                     time.Duration
	comp                                        *compactionResult // of a compaction scenario
}

type scenarioCtx struct {
	t     *testing.T
	start time.Time
	svc   *astroProc
	nodes []*natsNode
	pg    *pgProc
	lc    *loadClient
	res   *scenarioResult
}

// at sleeps until d into the load.
func (fx *scenarioCtx) at(d time.Duration) { time.Sleep(time.Until(fx.start.Add(d))) }

// recovered measures from t0 until /readyz answers 200 and then a write is
// acknowledged.
func (fx *scenarioCtx) recovered(what string, t0 time.Time) {
	fx.t.Helper()
	deadline := t0.Add(90 * time.Second)
	for !fx.svc.ready() {
		if time.Now().After(deadline) {
			fx.t.Errorf("NO RECOVERY after %s: /readyz not 200 within 90s; service log ends:\n%s", what, fx.svc.logTail(40))
			return
		}
		if !fx.svc.running() {
			fx.t.Errorf("NO RECOVERY after %s: the service exited; its log ends:\n%s", what, fx.svc.logTail(40))
			return
		}
		time.Sleep(25 * time.Millisecond) // polling a readiness probe, bounded by the deadline
	}
	ready := time.Since(t0)
	cmd := fx.lc.probeWrite()
	if cmd.Outcome != cmdAcked {
		fx.t.Errorf("NO RECOVERY after %s: ready after %v, but the probe write was %s after %d attempts: HTTP %d %s",
			what, ready.Round(time.Millisecond), cmd.Outcome, cmd.Attempts, cmd.Status, cmd.Answer)
		return
	}
	rec := recovery{what: what, ready: ready, write: cmd.End.Sub(t0)}
	if !fx.lc.visible(cmd.RespID, 60*time.Second) {
		fx.t.Errorf("NO RECOVERY after %s: the probe write %s was acknowledged but is not in the read model 60s later", what, cmd.RespID)
	}
	rec.visible = time.Since(t0)
	fx.res.recoveries = append(fx.res.recoveries, rec)
}

func scenarios() []scenario {
	return []scenario{
		{
			id: "kill9", title: "service kill -9 x4", natsNodes: 1, fullInbox: true, load: 16 * time.Second,
			inject: func(fx *scenarioCtx) {
				for i, at := range []time.Duration{3 * time.Second, 6500 * time.Millisecond, 10 * time.Second, 13500 * time.Millisecond} {
					fx.at(at)
					fx.svc.kill()
					t0 := time.Now()
					if err := fx.svc.start(); err != nil {
						fx.t.Fatalf("restart the service: %v", err)
					}
					fx.recovered(fmt.Sprintf("kill -9 #%d", i+1), t0)
				}
			},
		},
		{
			id: "natsrestart", title: "NATS kill -9 + restart", natsNodes: 1, fullInbox: true, load: 12 * time.Second,
			inject: func(fx *scenarioCtx) {
				fx.at(4 * time.Second)
				n := fx.nodes[0]
				n.kill()
				time.Sleep(time.Second)
				t0 := time.Now()
				if err := n.start(); err != nil {
					fx.t.Fatalf("restart NATS: %v", err)
				}
				if err := n.waitJetStream(60 * time.Second); err != nil {
					fx.t.Fatalf("restart NATS: %v\n%s", err, n.logTail(30))
				}
				fx.recovered("NATS restart", t0)
			},
		},
		{
			id: "pgrestart", title: "PostgreSQL restart", natsNodes: 1, fullInbox: true, load: 12 * time.Second,
			inject: func(fx *scenarioCtx) {
				fx.at(4 * time.Second)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := fx.pg.stop(ctx); err != nil {
					fx.t.Errorf("stop PostgreSQL: %v", err)
				}
				time.Sleep(time.Second)
				t0 := time.Now()
				if err := fx.pg.start(ctx); err != nil {
					fx.t.Fatalf("restart PostgreSQL: %v", err)
				}
				fx.recovered("PostgreSQL restart", t0)
			},
		},
		{
			id: "cluster", title: "R3 cluster: leader+svc -9", natsNodes: 3, load: 12 * time.Second,
			inject: func(fx *scenarioCtx) {
				fx.at(4 * time.Second)
				leader, err := streamLeader(natsURLs(fx.nodes))
				if err != nil {
					fx.t.Fatalf("find the stream leader: %v", err)
				}
				var victim *natsNode
				for _, n := range fx.nodes {
					if n.name == "nats-"+leader {
						victim = n
					}
				}
				if victim == nil {
					fx.t.Fatalf("stream leader %q is none of the nodes", leader)
				}
				// As a machine lost with both on it: the service restarts
				// while the streams it needs have no leader.
				victim.kill()
				fx.svc.kill()
				t0 := time.Now()
				if err := fx.svc.start(); err != nil {
					fx.t.Fatalf("restart the service: %v", err)
				}
				fx.recovered("kill -9 of stream leader "+leader+" and the service", t0)
				// And restarts on the degraded cluster once it has leaders.
				fx.at(8 * time.Second)
				fx.svc.kill()
				t0 = time.Now()
				if err := fx.svc.start(); err != nil {
					fx.t.Fatalf("restart the service: %v", err)
				}
				fx.recovered("service kill -9 with "+leader+" still down", t0)
			},
		},
		compactionScenario(),
	}
}

// streamLeader names the server leading the inbox stream, which takes
// most of the load's writes.
func streamLeader(urls string) (string, error) {
	nc, err := nats.Connect(urls, nats.Timeout(5*time.Second))
	if err != nil {
		return "", err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, inboxStream)
	if err != nil {
		return "", err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return "", err
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return "", fmt.Errorf("stream %s has no leader: %+v", inboxStream, info.Cluster)
	}
	if len(info.Cluster.Replicas)+1 != 3 {
		return "", fmt.Errorf("stream %s has %d replicas besides the leader, want 2 (R3)", inboxStream, len(info.Cluster.Replicas))
	}
	return info.Cluster.Leader, nil
}

func TestFaults(t *testing.T) {
	began := time.Now()
	bins := buildBinaries(t, t.TempDir())
	t.Logf("built the service and nats-server in %v", time.Since(began).Round(time.Millisecond))
	pg := startPG(t)

	var results []*scenarioResult
	for _, sc := range scenarios() {
		res := &scenarioResult{title: sc.title}
		results = append(results, res)
		t.Run(sc.id, func(t *testing.T) {
			start := time.Now()
			defer func() { res.elapsed = time.Since(start) }()
			runScenario(t, bins, pg, sc, res)
		})
	}

	var b strings.Builder
	fmt.Fprintf(&b, "\nFault suite: %d workers, took %v\n", workers, time.Since(began).Round(time.Second))
	fmt.Fprintf(&b, "%-27s %6s %6s %5s %4s %6s %6s %5s %5s %13s %6s %-9s %s\n",
		"scenario", "sent", "acked", "lost", "dup", "unaskd", "incons", "misrp", "gave", "retried(ambg)", "events", "readmodel", "recovery s: ready/write acked/visible")
	for _, r := range results {
		if !r.ran {
			fmt.Fprintf(&b, "%-27s (did not complete)\n", r.title)
			continue
		}
		var recs []string
		for _, rc := range r.recoveries {
			recs = append(recs, fmt.Sprintf("%.1f/%.1f/%.1f", rc.ready.Seconds(), rc.write.Seconds(), rc.visible.Seconds()))
		}
		fmt.Fprintf(&b, "%-27s %6d %6d %5d %4d %6d %6d %5d %5d %13s %6d %-9s %s\n",
			r.title, r.sent, r.cmdAcked, r.lost, r.dup, r.unasked, r.inconsistent, r.misreport, r.cmdGaveUp,
			fmt.Sprintf("%d(%d)", r.retried, r.ambiguous), r.events, r.readModel, strings.Join(recs, ", "))
		if r.comp != nil {
			fmt.Fprintf(&b, "%-27s %s\n", "", r.comp.row())
		}
	}
	t.Log(b.String())
	fmt.Print(b.String())
}

func runScenario(t *testing.T, bins binaries, pg *pgProc, sc scenario, res *scenarioResult) {
	dir := t.TempDir()
	nodes := startNATS(t, bins.nats, dir, sc.natsNodes)
	urls := natsURLs(nodes)
	svcDB := pg.createDB(t, "svc_"+sc.id)
	// Rate limiting is off: the suite is about faults, and 429s would make
	// most retries about the limiter instead (the client retries them).
	env := map[string]string{"ASTRO_NATS_URL": urls, "ASTRO_DATABASE_URL": svcDB, "ASTRO_RATE_LIMIT": "off"}
	// Compaction is off unless the scenario is about it: a compaction
	// removes from the log the events commands appended for an inbox (the
	// full inbox alone has 1,000), and the other scenarios hold every
	// acknowledged command to its event in the log, exactly once.
	env["ASTRO_COMPACT_EVERY"], env["ASTRO_ERASE_WITHIN"] = compactionOff["ASTRO_COMPACT_EVERY"], compactionOff["ASTRO_ERASE_WITHIN"]
	for k, v := range sc.env {
		env[k] = v
	}
	if sc.natsNodes > 1 {
		env["ASTRO_STREAM_REPLICAS"] = fmt.Sprint(sc.natsNodes)
	}
	svc := newAstro(bins.astro, dir, freePort(t), env)
	if err := svc.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.kill)
	if err := svc.waitReady(90 * time.Second); err != nil {
		t.Fatalf("faults: %v; service log ends:\n%s", err, svc.logTail(40))
	}
	lc := newClient(t, svc.base, "ws_"+sc.id, sc.id)
	t.Cleanup(func() { lc.abort.Store(true); lc.stopLoad() })
	if c := lc.probeWrite(); c.Outcome != cmdAcked {
		t.Fatalf("faults: the first write was %s: HTTP %d %s", c.Outcome, c.Status, c.Answer)
	}
	if sc.fullInbox {
		lc.full = "ufull"
		began := time.Now()
		lc.fillInbox(lc.full, 1000)
		t.Logf("filled the inbox of %s to the cap in %v", lc.full, time.Since(began).Round(100*time.Millisecond))
	}

	if sc.compaction {
		res.comp = &compactionResult{every: sc.env["ASTRO_COMPACT_EVERY"]}
		lc.rareDeleteAll = true // inboxes keep notifications to check pending
	}
	fx := &scenarioCtx{t: t, start: time.Now(), svc: svc, nodes: nodes, pg: pg, lc: lc, res: res}
	lc.startWorkers(workers)
	sc.inject(fx)
	fx.at(sc.load)
	lc.stopLoad()
	loadDone := time.Now()

	// The service must have come back on its own; give a last fault a
	// moment, and measure nothing here.
	if err := svc.waitReady(60 * time.Second); err != nil {
		t.Errorf("NO RECOVERY: after the load: %v; service log ends:\n%s", err, svc.logTail(40))
	}
	if sc.compaction {
		res.comp.settle(fx, urls)
	}

	cmds := lc.commands()
	sent, ack, rej, gave, byKind := summarize(cmds)
	res.sent, res.cmdAcked, res.cmdRejected, res.cmdGaveUp = sent, ack, rej, gave
	var maxLatency, maxInProgress time.Duration
	inProgress := 0
	for _, c := range cmds {
		if c.Outcome == cmdAcked && c.Attempts > 1 {
			res.retried++
		}
		if c.Transport > 0 {
			res.ambiguous++
		}
		if c.InProgress > 0 {
			inProgress++
			maxInProgress = max(maxInProgress, c.End.Sub(c.Start))
		}
		if c.Outcome == cmdAcked {
			maxLatency = max(maxLatency, c.End.Sub(c.Start))
		}
	}
	lc.mu.Lock()
	readsOK, readsBad := lc.readsOK, fmt.Sprint(lc.readsBad)
	lc.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	log, err := readLog(ctx, urls)
	if err != nil {
		t.Fatalf("faults: read the log: %v", err)
	}
	v := checkLog("ws_"+sc.id, log, cmds, sc.compaction)
	inconsistent := checkInvariants(log)
	v.Problems = append(v.Problems, inconsistent...)
	res.events, res.lost, res.dup, res.unasked, res.misreport, res.unexpected = v.Events, v.Lost, v.Duplicated, v.Unasked, v.Misreported, v.Unexpected
	res.inconsistent = len(inconsistent)

	// The read models must catch up with the log by themselves.
	phase := time.Now()
	if err := waitCheckpoints(ctx, svcDB, v.Targets, 60*time.Second); err != nil {
		t.Errorf("read models stuck: %v", err)
	}
	caughtUp := time.Since(phase)
	if sc.compaction {
		v.Problems = append(v.Problems, res.comp.checkPending(fx, log, cmds)...)
	}
	phase = time.Now()
	if err := svc.term(30 * time.Second); err != nil {
		t.Errorf("graceful stop: %v", err)
	} else if err := svc.exitErr(); err != nil {
		t.Errorf("graceful stop: the service exited with %v; log ends:\n%s", err, svc.logTail(10))
	}
	got, err := dumpReadModels(ctx, svcDB)
	if err != nil {
		t.Fatalf("faults: %v", err)
	}
	stopped := time.Since(phase)
	phase = time.Now()
	rebuildDB := pg.createDB(t, "rebuild_"+sc.id)
	// The rebuild's projectors log to a file: they may still write when a
	// failed rebuild returns.
	rebuildLog, err := os.Create(filepath.Join(dir, "rebuild.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer rebuildLog.Close()
	logged := func() string { b, _ := os.ReadFile(rebuildLog.Name()); return string(b) }
	if err := rebuild(ctx, urls, rebuildDB, v.Targets, rebuildLog); err != nil {
		t.Fatalf("faults: rebuild the read models: %v\n%s", err, logged())
	}
	want, err := dumpReadModels(ctx, rebuildDB)
	if err != nil {
		t.Fatalf("faults: %v", err)
	}
	rebuilt := time.Since(phase)
	if rebuilt > 10*time.Second {
		t.Logf("the rebuild was slow; its projectors logged:\n%s", logged())
	}
	t.Logf("read models caught up in %v; graceful stop took %v; rebuild took %v", caughtUp.Round(time.Millisecond), stopped.Round(time.Millisecond), rebuilt.Round(time.Millisecond))
	diff, diffRows := compareReadModels(got, want)
	res.readModel = "equal"
	if diff != "" {
		res.readModel = "DIFFERS"
		t.Errorf("read models differ from a rebuild from the log: %s", diff)
		v.Problems = append(v.Problems, diffRows...)
	}
	res.ran = true

	// Report.
	if res.comp != nil {
		t.Logf("%s: %s", sc.title, res.comp)
	}
	var recs []string
	for _, rc := range res.recoveries {
		recs = append(recs, fmt.Sprintf("%s: ready %.2fs, write acknowledged %.2fs, visible in its read model %.2fs", rc.what, rc.ready.Seconds(), rc.write.Seconds(), rc.visible.Seconds()))
	}
	rows := 0
	for _, r := range got {
		rows += len(r)
	}
	t.Logf("%s: %d writes sent, %d acknowledged (%d after retries, %d with an attempt left unanswered), %d rejected, %d gave up; "+
		"slowest acknowledged write %v; %d writes met a held idempotency claim (409), the slowest decided after %v; "+
		"%d reads ok, failed by status %s; %d events in the log; read models %s (%d rows); load %v, checks %v\n  %s\n  recoveries: %s",
		sc.title, sent, ack, res.retried, res.ambiguous, rej, gave, maxLatency.Round(time.Millisecond), inProgress, maxInProgress.Round(time.Millisecond),
		readsOK, readsBad, v.Events, res.readModel, rows, sc.load, time.Since(loadDone).Round(100*time.Millisecond),
		kindCounts(byKind), strings.Join(recs, "; "))
	if s := errorSummary(svc.logPath); s != "" {
		t.Logf("service log (%s) warnings and errors, by message:\n%s", svc.logPath, s)
	}
	var crashes []string
	crashes = append(crashes, svc.unexpectedExits()...)
	for _, n := range nodes {
		crashes = append(crashes, n.unexpectedExits()...)
	}
	if len(crashes) > 0 {
		t.Errorf("processes exited on their own (a manual restart would be needed):\n  %s\nservice log ends:\n%s", strings.Join(crashes, "\n  "), svc.logTail(40))
	}
	if v.Lost+v.Duplicated+v.Unasked+v.Misreported+v.Unexpected+v.GaveUp+len(inconsistent) > 0 || diff != "" || res.comp.failed() {
		shown := v.Problems[:min(40, len(v.Problems))]
		t.Errorf("%s: lost %d, duplicated %d, unasked %d, inconsistent %d, misreported %d, unexpected answers %d, gave up %d; evidence (%d of %d):\n  %s",
			sc.title, v.Lost, v.Duplicated, v.Unasked, len(inconsistent), v.Misreported, v.Unexpected, v.GaveUp, len(shown), len(v.Problems), strings.Join(shown, "\n  "))
	}
}

var logMsg = regexp.MustCompile(`level=(WARN|ERROR) msg=("(?:[^"\\]|\\.)*"|\S+)`)

// errorSummary counts the service's warnings and errors by message.
func errorSummary(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	counts := map[string]int{}
	example := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		m := logMsg.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		k := m[1] + " " + m[2]
		counts[k]++
		if _, ok := example[k]; !ok {
			example[k] = truncate(line, 400)
		}
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return counts[keys[i]] > counts[keys[j]] })
	var out []string
	for _, k := range keys[:min(12, len(keys))] {
		out = append(out, fmt.Sprintf("  %5d × %s\n        e.g. %s", counts[k], k, example[k]))
	}
	return strings.Join(out, "\n")
}
