// Package rounds shares an operation among the callers that want it at the
// same time, the way PostgreSQL groups its commits: for each key one round
// of the operation runs at a time, and every caller that arrives while it
// runs is served by the next round, whatever their number. No caller is
// served by a round that began before it called, so an operation that
// reads the log (the last position of a subject) or makes it durable (an
// fsync) serves each caller as if it had run it alone, after its call.
package rounds

import (
	"context"
	"sync"
)

// Group runs rounds of one operation, per key.
type Group[V any] struct {
	run func(key string) (V, error)
	// detached runs every round on a goroutine, the first too, so that
	// every caller can leave at its ctx's end.
	detached bool

	mu   sync.Mutex
	keys map[string]*queue[V]
}

// queue is the state of one key: the caller that found none runs the first
// round, and a goroutine the rounds of those who came meanwhile.
type queue[V any] struct {
	next *round[V] // the round that callers arriving now join; nil when none
}

// round is one run of the operation and the callers waiting for it.
type round[V any] struct {
	done chan struct{}
	v    V
	err  error
}

// New returns a Group running run. A round serves every caller that joined
// it, so run takes no caller's context: it must end by itself, soon (a
// request with a timeout of its own), since the caller that finds no round
// under way runs one itself and waits for its end whatever its ctx says.
// One caller at a time (the common case) then costs no goroutine and no
// hand-off to one and back, a good part of a short round such as a direct
// get on the embedded server.
func New[V any](run func(key string) (V, error)) *Group[V] {
	return &Group[V]{run: run, keys: map[string]*queue[V]{}}
}

// NewDetached is New for an operation that may not end (an fsync on a
// stalled disk): every round runs on a goroutine of its own, and every
// caller leaves at its ctx's end.
func NewDetached[V any](run func(key string) (V, error)) *Group[V] {
	g := New(run)
	g.detached = true
	return g
}

// Do returns what a round of the operation on key that began after the call
// returned, or ctx's error if ctx ends first; the round still serves the
// others. (Without NewDetached, a caller that finds no round under way runs
// it itself: see New.)
func (g *Group[V]) Do(ctx context.Context, key string) (V, error) {
	g.mu.Lock()
	q := g.keys[key]
	if q == nil {
		q = &queue[V]{}
		g.keys[key] = q
		if !g.detached {
			g.mu.Unlock()
			defer g.handOn(key, q) // even if run panics: a stuck key would hold every later caller
			return g.run(key)
		}
		go g.loop(key, q)
	}
	if q.next == nil {
		q.next = &round[V]{done: make(chan struct{})}
	}
	r := q.next
	g.mu.Unlock()
	select {
	case <-r.done:
		return r.v, r.err
	case <-ctx.Done():
		var zero V
		return zero, ctx.Err()
	}
}

// handOn ends the round a caller ran itself: those who came meanwhile get
// a goroutine to run theirs, and with none the key goes.
func (g *Group[V]) handOn(key string, q *queue[V]) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if q.next == nil {
		delete(g.keys, key)
		return
	}
	go g.loop(key, q)
}

// loop runs key's rounds one after the other until no caller waits. A round
// is taken out of next before it runs, so whoever joined it had called
// before.
func (g *Group[V]) loop(key string, q *queue[V]) {
	for {
		g.mu.Lock()
		r := q.next
		q.next = nil
		if r == nil {
			delete(g.keys, key)
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		r.v, r.err = g.run(key)
		close(r.done)
	}
}
