package main

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestProcsTick: one P while it keeps up, every P once goroutines queue
// for it, back to one after a calm second, and slower back when one P
// failed right after a switch.
func TestProcsTick(t *testing.T) {
	type tick struct {
		load  float64
		waits uint64
		mean  time.Duration
	}
	idle := tick{0.01, 3, 2 * time.Microsecond}
	single := tick{0.8, 1100, 12 * time.Microsecond}  // one request at a time, on one P
	queued := tick{0.95, 1800, 90 * time.Microsecond} // 32 at a time, on one P
	busy := tick{1.25, 2500, 40 * time.Microsecond}   // 32 at a time, on every P
	oneAtATime := tick{0.88, 1500, 15 * time.Microsecond}
	times := func(n int, tk tick) []tick { return slices.Repeat([]tick{tk}, n) }
	calm := procsCalm
	cases := []struct {
		name  string
		ticks []tick
		want  []int // Ps after each tick
	}{
		{"one request at a time stays on one P", times(3, single), []int{1, 1, 1}},
		{"an idle service's slow wake-up is no queue", []tick{{0.01, 2, 300 * time.Microsecond}}, []int{1}},
		{"one slow tick is no queue", []tick{single, queued, single, queued, single}, []int{1, 1, 1, 1, 1}},
		{"a queue takes every P", []tick{single, queued, queued, busy}, []int{1, 1, 4, 4}},
		{"a calm second gives them back",
			slices.Concat(times(2, queued), times(calm-1, oneAtATime), []tick{oneAtATime, single}),
			slices.Concat([]int{1, 4}, slices.Repeat([]int{4}, calm-1), []int{1, 1})},
		{"a busy tick restarts the calm",
			slices.Concat(times(2, queued), times(5, idle), []tick{busy}, times(calm-1, idle), []tick{idle}),
			slices.Concat([]int{1, 4}, slices.Repeat([]int{4}, 5), []int{4}, slices.Repeat([]int{4}, calm-1), []int{1})},
		{"one P failing right after the switch doubles the calm it takes",
			slices.Concat(times(2, queued), times(calm, idle), times(2, queued), times(2*calm-1, idle), []tick{idle}),
			slices.Concat([]int{1, 4}, slices.Repeat([]int{4}, calm-1), []int{1, 1, 4}, slices.Repeat([]int{4}, 2*calm-1), []int{1})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := &procs{max: 4, n: 1, need: calm, oneFor: calm + 1}
			var got []int
			for _, tk := range c.ticks {
				before := p.n
				if changed := p.tick(tk.load, tk.waits, tk.mean); changed != (p.n != before) {
					t.Errorf("tick %d: reported a change %v going from %d to %d Ps", len(got)+1, changed, before, p.n)
				}
				got = append(got, p.n)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("Ps after each tick:\n got %v\nwant %v", got, c.want)
			}
		})
	}
}

// TestProcsRun: run starts on one P and gives every P back when it ends;
// on one core it leaves the scheduler alone.
func TestProcsRun(t *testing.T) {
	for _, max := range []int{1, 2} {
		var set []int
		p := &procs{max: max, cpu: func() time.Duration { return 0 }, wait: func() (uint64, time.Duration) { return 0, 0 },
			set: func(n int) { set = append(set, n) }}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		p.run(ctx)
		want := []int{1, 2}
		if max == 1 {
			want = nil
		}
		if !slices.Equal(set, want) {
			t.Errorf("max %d: GOMAXPROCS set to %v, want %v", max, set, want)
		}
	}
}

// TestSchedWaits: the runtime's scheduling latencies are read as what
// was added since the last read.
func TestSchedWaits(t *testing.T) {
	wait := schedWaits()
	wait()
	done := make(chan struct{})
	for range 200 {
		go func() { done <- struct{}{} }()
		<-done
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, mean := wait()
		if n > 0 {
			if mean < 0 || mean > time.Second {
				t.Fatalf("mean wait %v over %d goroutines", mean, n)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no scheduling latency recorded after 200 goroutines")
		}
		for range 200 {
			go func() { done <- struct{}{} }()
			<-done
		}
	}
}
