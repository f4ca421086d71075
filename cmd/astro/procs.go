package main

import (
	"context"
	"math"
	"runtime"
	"runtime/metrics"
	"syscall"
	"time"
)

// procs sizes the Go scheduler to the load. A request hands off between
// goroutines half a dozen times (HTTP, the NATS client, the embedded
// server's read and stream loops, the answer), and with two or more Ps
// each hand-off wakes a thread on another core. On a small machine that
// PostgreSQL shares, those wake-ups cost more than the work handed off:
// on 2 cores, one request at a time, one P served sends, deletes and
// renames about 1.1× as fast as two, but 32 at a time it cut renames to
// 0.81× of the CRUD service (the README's Benchmarks). So the service runs
// on one P while that P keeps up, and on every core once goroutines queue
// for it; it goes back to one when the service has used less than a core
// for a while.
//
// It is a process setting, so main runs it and tests do not.
type procs struct {
	max  int                                   // Ps under load: GOMAXPROCS as the process started
	cpu  func() time.Duration                  // CPU time the process has used so far
	wait func() (n uint64, mean time.Duration) // goroutines that became runnable since the last call, and their mean wait for a P
	set  func(n int)

	n      int // Ps now
	queued int // ticks in a row on one P with goroutines queued for it
	calm   int // ticks in a row on every P that one core would have carried
	// need is how many calm ticks it takes to go back to one P. It doubles
	// each time one P fails right after a switch, so a load on the edge
	// does not switch back and forth.
	need   int
	oneFor int // ticks since the last switch to one P
}

const (
	procsTick = 25 * time.Millisecond
	// procsQueued: at one P, goroutines that wait this long on average for
	// it mean it does not keep up. One request at a time waits 10–40 µs,
	// 32 at a time 50–170 µs (measured under ../shared/perf/run.sh).
	procsQueued = 50 * time.Microsecond
	// procsQueuedFor ticks in a row: a queue, not one slow moment (a
	// projector's batch, a collection).
	procsQueuedFor = 2
	// procsMinWaits: fewer scheduling samples than this in a tick say
	// nothing: an idle service's one slow wake-up is not a queue. One
	// request at a time gives about 250 a tick.
	procsMinWaits = 25
	// procsCalmLoad: on every P, using less than this share of one core
	// says one P could carry the load (one request at a time uses about
	// 0.9 on two Ps, 32 at a time over 1.1).
	procsCalmLoad = 1.0
	procsCalm     = 40 // ticks: a second
	procsMaxCalm  = 1200
)

// newProcs is procs on the process's own CPU time and scheduler.
func newProcs() *procs {
	return &procs{max: runtime.GOMAXPROCS(0), cpu: processCPU, wait: schedWaits(), set: func(n int) { runtime.GOMAXPROCS(n) }}
}

// run adjusts GOMAXPROCS every procsTick until ctx ends, then gives the
// process back every P.
func (p *procs) run(ctx context.Context) {
	if p.max < 2 {
		return
	}
	p.n, p.need, p.oneFor = 1, procsCalm, procsCalm+1
	p.set(1)
	defer p.set(p.max)
	t := time.NewTicker(procsTick)
	defer t.Stop()
	last, lastAt := p.cpu(), time.Now()
	p.wait()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			used := p.cpu()
			load := float64(used-last) / float64(now.Sub(lastAt))
			last, lastAt = used, now
			waits, mean := p.wait()
			if p.tick(load, waits, mean) {
				p.set(p.n)
			}
		}
	}
}

// tick sets p.n, the Ps for the next tick, from the last one's CPU load
// (cores) and scheduling waits, and reports whether it changed.
func (p *procs) tick(load float64, waits uint64, mean time.Duration) bool {
	if p.n == 1 {
		p.oneFor++
		if waits < procsMinWaits || mean < procsQueued {
			p.queued = 0
			return false
		}
		if p.queued++; p.queued < procsQueuedFor {
			return false
		}
		if p.oneFor <= procsCalm {
			p.need = min(2*p.need, procsMaxCalm)
		} else {
			p.need = procsCalm
		}
		p.queued, p.calm, p.n = 0, 0, p.max
		return true
	}
	if load >= procsCalmLoad {
		p.calm = 0
		return false
	}
	if p.calm++; p.calm < p.need {
		return false
	}
	p.calm, p.oneFor, p.n = 0, 0, 1
	return true
}

// processCPU is the user and system CPU time of the process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// schedWaits reads the runtime's histogram of how long runnable goroutines
// waited for a P, and returns a function that gives what was added to it
// since its last call.
func schedWaits() func() (uint64, time.Duration) {
	sample := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	var prev []uint64
	return func() (uint64, time.Duration) {
		metrics.Read(sample)
		h := sample[0].Value.Float64Histogram()
		var n uint64
		var sum float64
		for i, c := range h.Counts {
			if i < len(prev) {
				c -= prev[i]
			}
			// A bucket counts as its lower bound; the first one's is -Inf.
			if lo := h.Buckets[i]; c > 0 && !math.IsInf(lo, 0) {
				sum += float64(c) * lo
			}
			n += c
		}
		prev = append(prev[:0], h.Counts...)
		if n == 0 {
			return 0, 0
		}
		return n, time.Duration(sum / float64(n) * float64(time.Second))
	}
}
