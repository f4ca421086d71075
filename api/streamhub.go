package api

import (
	"context"
	"log/slog"
	"sync"

	"astro/events"
)

// hub follows every inbox event of the log with one ordered consumer per
// instance and hands each to the streams open on its inbox. One consumer
// per stream would cost the JetStream server a consumer each (it allows
// 1,000 a stream by default, across all instances); the hub costs it one
// per instance, whatever the number of streams.
//
// A stream subscribes before it reads its inbox's state, then reads what
// the log holds after that state with direct gets: every event is either
// already in the log when that read ends, or delivered by the hub after the
// subscription. Events that come both ways are told apart by position.
type hub struct {
	log    InboxLog
	logger *slog.Logger
	buffer int // events a stream may fall behind the hub before it is dropped

	mu      sync.Mutex
	subs    map[string]map[*follower]struct{}
	running bool
	cancel  context.CancelFunc
	closed  bool
}

// follower is one stream's subscription.
type follower struct {
	events  chan events.Event
	dropped chan struct{} // closed when the hub lets go of it
	once    sync.Once
}

func (f *follower) drop() { f.once.Do(func() { close(f.dropped) }) }

func newHub(log InboxLog, logger *slog.Logger) *hub {
	return &hub{log: log, logger: logger, buffer: 16, subs: map[string]map[*follower]struct{}{}}
}

// subscribe starts receiving the events of subject, starting the hub if it
// is not running. The returned func unsubscribes.
func (h *hub) subscribe(ctx context.Context, subject string) (*follower, func(), error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.running && !h.closed {
		// Everything after the log's end now goes through the hub; what is
		// before it, the stream reads itself.
		pos, err := h.log.End(ctx, events.KindInbox)
		if err != nil {
			return nil, nil, err
		}
		hctx, cancel := context.WithCancel(context.Background())
		h.running, h.cancel = true, cancel
		go h.run(hctx, pos+1)
	}
	f := &follower{events: make(chan events.Event, h.buffer), dropped: make(chan struct{})}
	if h.closed {
		f.drop()
	}
	if h.subs[subject] == nil {
		h.subs[subject] = map[*follower]struct{}{}
	}
	h.subs[subject][f] = struct{}{}
	return f, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.subs[subject], f)
		if len(h.subs[subject]) == 0 {
			delete(h.subs, subject)
		}
	}, nil
}

func (h *hub) run(ctx context.Context, from uint64) {
	err := h.log.Follow(ctx, events.KindSubjects(events.KindInbox), events.ScanFrom{Seq: from}, func(e events.Event) error {
		subject := events.Subject(e.WorkspaceID, e.Aggregate)
		h.mu.Lock()
		defer h.mu.Unlock()
		for f := range h.subs[subject] {
			select {
			case f.events <- e:
			default:
				// Never wait for one slow client: it reconnects with its
				// last event id and reads what it missed from the log.
				delete(h.subs[subject], f)
				f.drop()
			}
		}
		return nil
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	if ctx.Err() == nil {
		h.logger.Warn("notification streams: following the log failed; open streams end and reconnect", "err", err)
	}
	// Every stream ends; the next one starts the hub again.
	for subject, fs := range h.subs {
		for f := range fs {
			f.drop()
		}
		delete(h.subs, subject)
	}
	h.running = false
	h.cancel()
}

// close stops the hub for good.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	if h.cancel != nil {
		h.cancel()
	}
}
