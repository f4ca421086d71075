package rounds

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeLog stands in for the log: a round serves what was written when it
// began, the way a read of the last position or an fsync does.
type fakeLog struct {
	written atomic.Uint64
	runs    atomic.Uint64
	gate    chan struct{} // when set, a round takes a token from it before it ends
}

func (f *fakeLog) run(string) (uint64, error) {
	seen := f.written.Load()
	f.runs.Add(1)
	if f.gate != nil {
		<-f.gate
	} else {
		time.Sleep(100 * time.Microsecond)
	}
	return seen, nil
}

func TestEveryCallerIsServedAfterItsCallAndRoundsAreShared(t *testing.T) {
	var log fakeLog
	g := New(log.run)
	const callers, each = 32, 50
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				mine := log.written.Add(1) // answered before the call
				seen, err := g.Do(t.Context(), "k")
				if err != nil {
					errs <- err
					return
				}
				if seen < mine {
					errs <- errors.New("served by a round that began before the call")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// 32 callers waiting on a 100 µs operation share it.
	if n := log.runs.Load(); n > callers*each/2 {
		t.Fatalf("%d rounds for %d calls: not shared", n, callers*each)
	}
	waitFor(t, func() bool { return keys(g) == 0 }, "the keys to go once no caller waits")
}

func TestKeysRunApart(t *testing.T) {
	log := fakeLog{gate: make(chan struct{})}
	g := New(log.run)
	served := make(chan error, 2)
	for _, key := range []string{"a", "b"} {
		go func() {
			_, err := g.Do(t.Context(), key)
			served <- err
		}()
	}
	waitFor(t, func() bool { return log.runs.Load() == 2 }, "a round of each key at once")
	log.gate <- struct{}{}
	log.gate <- struct{}{}
	for range 2 {
		if err := <-served; err != nil {
			t.Fatal(err)
		}
	}
}

func TestErrorsReachTheirRoundOnly(t *testing.T) {
	fail := errors.New("disk gone")
	var runs atomic.Int32
	g := New(func(string) (struct{}, error) {
		if runs.Add(1) == 1 {
			return struct{}{}, fail
		}
		return struct{}{}, nil
	})
	if _, err := g.Do(t.Context(), ""); !errors.Is(err, fail) {
		t.Fatalf("first round: %v, want %v", err, fail)
	}
	if _, err := g.Do(t.Context(), ""); err != nil {
		t.Fatalf("a later round carries an earlier round's error: %v", err)
	}
}

// A caller waiting for a round stops waiting when its context ends; the
// round goes on and serves the others. The caller that found no round under
// way runs its own and waits for its end.
func TestACallerGivesUpWithItsContext(t *testing.T) {
	log := fakeLog{gate: make(chan struct{})}
	g := New(log.run)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := g.Do(ctx, "k") // runs the first round itself
		first <- err
	}()
	waitFor(t, func() bool { return log.runs.Load() == 1 }, "the first round")
	log.written.Store(7)
	served := make(chan uint64, 1)
	go func() {
		seen, err := g.Do(t.Context(), "k") // joins the second round
		if err != nil {
			t.Error(err)
		}
		served <- seen
	}()
	waitFor(t, func() bool { return joined(g, "k") }, "a caller to join the second round")
	waiter, cancelWaiter := context.WithCancel(t.Context())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := g.Do(waiter, "k") // the second round too
		gaveUp <- err
	}()
	cancelWaiter()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("Do with its context ended: %v", err)
	}
	cancel()
	select {
	case err := <-first:
		t.Fatalf("the caller running its round returned before the round ended: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	log.gate <- struct{}{} // the first round ends
	if err := <-first; err != nil {
		t.Fatalf("the first round: %v", err)
	}
	waitFor(t, func() bool { return log.runs.Load() == 2 }, "the second round")
	log.gate <- struct{}{}
	if seen := <-served; seen != 7 {
		t.Fatalf("the second round served %d, want 7", seen)
	}
	waitFor(t, func() bool { return keys(g) == 0 }, "the key to go once no caller waits")
}

func joined[V any](g *Group[V], key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.keys[key]
	return q != nil && q.next != nil
}

func keys[V any](g *Group[V]) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.keys)
}

func waitFor(t *testing.T, ok func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A round that panics in the caller running it takes the panic to that
// caller, and leaves the key to the next.
func TestAPanickingRoundFreesItsKey(t *testing.T) {
	var runs atomic.Int32
	g := New(func(string) (int, error) {
		if runs.Add(1) == 1 {
			panic("boom")
		}
		return 2, nil
	})
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not reach the caller")
			}
		}()
		_, _ = g.Do(t.Context(), "k")
	}()
	if n := keys(g); n != 0 {
		t.Fatalf("%d keys after the panic, want 0", n)
	}
	if v, err := g.Do(t.Context(), "k"); v != 2 || err != nil {
		t.Fatalf("the next round: %d, %v", v, err)
	}
}

// In a detached group even the caller that began a round leaves at its
// context's end, the round going on without it (an fsync the disk holds).
func TestADetachedRoundLetsItsCallerGo(t *testing.T) {
	log := fakeLog{gate: make(chan struct{})}
	g := NewDetached(log.run)
	ctx, cancel := context.WithCancel(t.Context())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := g.Do(ctx, "k")
		gaveUp <- err
	}()
	waitFor(t, func() bool { return log.runs.Load() == 1 }, "the round")
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("Do with its context ended: %v", err)
	}
	log.gate <- struct{}{} // the round ends, with nobody left to serve
	waitFor(t, func() bool { return keys(g) == 0 }, "the key to go once no caller waits")
}
