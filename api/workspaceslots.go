package api

import (
	"context"
	"sync"
	"time"
)

// slots bounds how many requests of one workspace run at once, so that one
// workspace cannot hold every connection of the read models' pool (32) and
// make every other workspace wait. A workspace's requests past its share
// wait a little for a slot, then are refused with 429 and Retry-After. The
// rate limit bounds how often a caller asks; this bounds how much of the
// service a workspace holds at a time, whatever each request costs.
type slots struct {
	per  int           // slots per workspace
	wait time.Duration // longest a request waits for one

	mu    sync.Mutex
	inUse map[string]int
	freed *sync.Cond
}

func newSlots(per int, wait time.Duration) *slots {
	s := &slots{per: per, wait: wait, inUse: map[string]int{}}
	s.freed = sync.NewCond(&s.mu)
	return s
}

// acquire takes a slot of workspace, waiting up to s.wait (and ctx); it
// returns the release, or false when none came free.
func (s *slots) acquire(ctx context.Context, workspace string) (func(), bool) {
	ctx, cancel := context.WithTimeout(ctx, s.wait)
	defer cancel()
	// A Cond cannot wait on a context: wake the waiters when it ends.
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.freed.Broadcast()
	})
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.inUse[workspace] >= s.per {
		if ctx.Err() != nil {
			return nil, false
		}
		s.freed.Wait()
	}
	s.inUse[workspace]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.inUse[workspace]--; s.inUse[workspace] == 0 {
				delete(s.inUse, workspace) // the map holds only busy workspaces
			}
			s.freed.Broadcast()
		})
	}, true
}
