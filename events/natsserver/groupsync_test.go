package natsserver

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeStore stands in for the file system: a write is durable once a sync
// that began after it has ended.
type fakeStore struct {
	written atomic.Uint64 // writes made
	durable atomic.Uint64 // writes covered by the last sync to end
	syncs   atomic.Uint64
}

func (f *fakeStore) sync() error {
	covered := f.written.Load() // a sync covers what was written when it began
	time.Sleep(100 * time.Microsecond)
	f.syncs.Add(1)
	f.durable.Store(covered)
	return nil
}

func TestGroupSyncCoversEveryEarlierWriteAndGroups(t *testing.T) {
	var store fakeStore
	g := &groupSync{sync: store.sync}
	const writers, each = 32, 50
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				mine := store.written.Add(1)
				if err := g.Sync(t.Context()); err != nil {
					errs <- err
					return
				}
				if d := store.durable.Load(); d < mine {
					errs <- errors.New("answered by a sync that began before the write")
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
	// 32 writers waiting on a 100 µs sync share it: one fsync per write
	// is what JetStream's own sync_always does, and what this replaces.
	if n := store.syncs.Load(); n > writers*each/2 {
		t.Fatalf("%d syncs for %d writes: not grouped", n, writers*each)
	}
}

func TestGroupSyncErrorsReachTheirRoundOnly(t *testing.T) {
	fail := errors.New("disk gone")
	var calls atomic.Int32
	g := &groupSync{sync: func() error {
		if calls.Add(1) == 1 {
			return fail
		}
		return nil
	}}
	if err := g.Sync(t.Context()); !errors.Is(err, fail) {
		t.Fatalf("first sync: %v, want %v", err, fail)
	}
	if err := g.Sync(t.Context()); err != nil {
		t.Fatalf("a later round carries an earlier round's error: %v", err)
	}
}

func TestGroupSyncGivesUpWithItsContext(t *testing.T) {
	release := make(chan struct{})
	g := &groupSync{sync: func() error { <-release; return nil }}
	defer close(release)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := g.Sync(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Sync with its context ended: %v", err)
	}
}
