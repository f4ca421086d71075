package natsserver

import (
	"context"
	"sync"
)

// groupSync makes writes durable the way PostgreSQL commits them: one sync
// at a time, and every caller that arrives while one runs is served by the
// next, whatever their number. A caller is never served by a sync that began
// before it called, so what it wrote before calling is covered.
type groupSync struct {
	sync func() error

	mu      sync.Mutex
	next    *syncRound // the round that callers arriving now wait for
	running bool       // a goroutine is running rounds
}

// syncRound is one sync and the callers waiting for it.
type syncRound struct {
	done chan struct{}
	err  error
}

// Sync returns once a sync that began after the call has ended, with its
// error, or when ctx ends first.
func (g *groupSync) Sync(ctx context.Context) error {
	g.mu.Lock()
	if g.next == nil {
		g.next = &syncRound{done: make(chan struct{})}
	}
	r := g.next
	if !g.running {
		g.running = true
		go g.run()
	}
	g.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run syncs round after round until no caller waits. A round is taken out
// of next before its sync begins, so whoever joined it had called before.
func (g *groupSync) run() {
	for {
		g.mu.Lock()
		r := g.next
		g.next = nil
		if r == nil {
			g.running = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		r.err = g.sync()
		close(r.done)
	}
}
