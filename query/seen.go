package query

import (
	"hash/maphash"
	"sync"
	"time"

	"astro/events"
)

// Seen is what this instance has seen of an event stream as one of its
// projectors receives it, before it applies it: the position up to which
// every event went past, and, per key, the last position at which
// something of the key changed. Of the history stream (NewScopesSeen), the
// key is a workspace, changed by its resources' events and its erasure: a
// rename answers with the resources in scope from memory, without asking
// the log for their last position, and its append expects the log to be
// where Seen is, so the log refuses it if anything came after
// (Resources.Current). Of the inbox stream (NewInboxesSeen), the key is an
// inbox: an unread count comes from memory once the log says it holds
// nothing after where Seen is (Notifications.Current).
//
// Keys share changedAt's slots by hash: a collision sends a request the
// long way, never to a wrong answer.
type Seen struct {
	seed maphash.Seed
	key  func(subject string) (string, bool) // what an event on subject changes

	mu        sync.Mutex
	gen       uint64 // a new one each time what went past stops being complete
	delivered uint64 // the consumer's sequence of the last first delivery
	known     bool   // whether upTo is
	upTo      uint64 // every event up to it went past in this generation
	changedAt []uint64
	moved     chan struct{} // closed when upTo moves, if someone waits for it
	// behind is the position a reach gave up waiting for: until upTo gets
	// there, deliveries lag, and a reach answers at once instead of
	// waiting in vain too.
	behind uint64
}

// NewScopesSeen returns a Seen of the history stream that has seen nothing,
// keyed by the workspaces whose resources in scope an event changes.
func NewScopesSeen() *Seen {
	return newSeen(1<<12, func(subject string) (string, bool) {
		ws, a, err := events.ParseSubject(subject)
		return ws, err == nil && (a.Kind == events.KindResource || a.Kind == events.KindWorkspace)
	})
}

// NewInboxesSeen returns a Seen of the inbox stream that has seen nothing,
// keyed by inbox subject.
func NewInboxesSeen() *Seen {
	return newSeen(1<<16, func(subject string) (string, bool) { return subject, true })
}

func newSeen(slots int, key func(string) (string, bool)) *Seen {
	return &Seen{seed: maphash.MakeSeed(), key: key, changedAt: make([]uint64, slots)}
}

// Mark is the generation of what went past. Taken before a read of the
// log's last position for some data (a workspace's resources, an inbox):
// every event after that position goes past in this generation (its
// deliveries started before), or the generation changes.
func (s *Seen) Mark() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// Started is told that deliveries start after stream position from, at the
// consumer's sequence delivered. Their token is the new generation.
func (s *Seen) Started(from, delivered uint64) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	s.delivered, s.upTo, s.known = delivered, from, true
	return s.gen
}

// Stopped is told that deliveries stopped: the log goes on without them.
func (s *Seen) Stopped() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	s.known = false
}

// Delivered is told of the event on subject at stream position seq, the
// consumer's delivery dseq, first unless it is a redelivery, by the
// deliveries of generation gen. A first delivery that does not follow the
// one before means a delivery was lost in flight (the runner then starts
// again): until it does, nothing is known.
func (s *Seen) Delivered(gen uint64, subject string, seq, dseq uint64, first bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.gen {
		return // late: its deliveries stopped
	}
	if first {
		if dseq != s.delivered+1 {
			s.gen++
			s.known = false
		}
		s.delivered = dseq
	}
	if k, ok := s.key(subject); ok {
		slot := &s.changedAt[s.slot(k)]
		*slot = max(*slot, seq)
	}
	if s.known && seq > s.upTo {
		s.upTo = seq
		if s.moved != nil {
			close(s.moved)
			s.moved = nil
		}
	}
}

// reach waits, for at most wait, until every event up to position pos has
// gone past, and reports whether it has. The write that answered pos was
// answered when the log had it, and its delivery here is usually a
// fraction of a millisecond behind. While deliveries lag further (a
// projector catching up), only the first reach waits.
func (s *Seen) reach(pos uint64, wait time.Duration) bool {
	var timeout <-chan time.Time
	for {
		s.mu.Lock()
		if !s.known || s.upTo >= pos {
			ok := s.known
			s.mu.Unlock()
			return ok
		}
		if s.upTo < s.behind {
			s.mu.Unlock()
			return false
		}
		if s.moved == nil {
			s.moved = make(chan struct{})
		}
		moved := s.moved
		s.mu.Unlock()
		if timeout == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-moved:
		case <-timeout:
			s.mu.Lock()
			s.behind = max(s.behind, pos)
			s.mu.Unlock()
			return false
		}
	}
}

// unchanged returns the position up to which every event went past, if it
// is known, the generation is still gen, and no event of key (or of one
// sharing its slot) went past after position pos.
func (s *Seen) unchanged(key string, gen, pos uint64) (upTo uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.gen || !s.known || s.changedAt[s.slot(key)] > pos {
		return 0, false
	}
	return s.upTo, true
}

func (s *Seen) slot(key string) uint64 {
	return maphash.String(s.seed, key) % uint64(len(s.changedAt))
}
