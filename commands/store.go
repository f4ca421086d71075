package commands

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"slices"
	"sync"
	"time"

	"astro/events"
)

// Log is the event log as the write side needs it.
type Log interface {
	// Append appends e to subject if the last event on subject still has
	// sequence expected (0: no event yet), and returns e's sequence;
	// events.ErrConflict when another append won, events.ErrAlreadyAppended
	// when e (by its id) is in the log already.
	Append(ctx context.Context, subject string, expected uint64, e events.Event) (uint64, error)
	// AppendAt is Append on one more condition when at is not 0: that
	// the last position of subject's stream is still at. When it is not,
	// it appends nothing and answers events.ErrLogMoved.
	AppendAt(ctx context.Context, subject string, expected, at uint64, e events.Event) (uint64, error)
	// AppendAfter is Append on another condition in place of expected:
	// that the last event on the subjects guard matches (subject among
	// them) is still at guardSeq. When it is not, it appends nothing and
	// answers events.ErrLogMoved.
	AppendAfter(ctx context.Context, subject, guard string, guardSeq uint64, e events.Event) (uint64, error)
	// Read calls fn for each event of subject after sequence after, in
	// order, and returns the sequence of the last one (after if none).
	Read(ctx context.Context, subject string, after uint64, fn func(events.Event) error) (uint64, error)
	// LastSeq is the sequence of the last event on subject, 0 if none.
	LastSeq(ctx context.Context, subject string) (uint64, error)
	// Durable returns once the events of subject up to sequence seq are
	// as durable as an append's answer promises.
	Durable(ctx context.Context, subject string, seq uint64) error
}

// Snapshots stores aggregate state at a sequence, so loading an aggregate
// costs a snapshot plus the few events after it, never its whole history.
type Snapshots interface {
	// Load returns seq 0 and no data when key has no snapshot.
	Load(ctx context.Context, key string) (seq uint64, data []byte, err error)
	Save(ctx context.Context, key string, seq uint64, data []byte) error
}

// Aggregate is the state a command is decided against. Apply folds one
// event into it; state is rebuilt only by Apply.
type Aggregate interface {
	Apply(events.Event) error
}

// StoreConfig tunes a Store.
type StoreConfig struct {
	// Name identifies the aggregate's state shape in snapshot keys; change
	// it when the shape changes so old snapshots are ignored, not misread.
	Name string
	// SnapshotEvery is how many events may follow a snapshot before a new
	// one is written. Default 100.
	SnapshotEvery uint64
	// CacheBytes bounds the memory of the aggregates kept in memory: the
	// least recently used go first. An aggregate that reports its Size
	// counts that much, any other 256 bytes. Default 64 MiB: 25,000
	// inboxes of 100 notifications, 2,600 full ones. A working set beyond
	// it is served by cold loads (a snapshot and the few events after it).
	CacheBytes int
	// MaxAttempts bounds how often a command is decided: a race lost by
	// an append, or by a no-op or a refusal whose state another writer
	// had moved on, decides it again, and past the bound it answers a
	// conflict. Default 20.
	MaxAttempts int
	Logger      *slog.Logger
	// Metrics, when set, is told of cache hits, cold loads and lost races.
	Metrics StoreMetrics
}

// StoreMetrics is what a Store reports.
type StoreMetrics interface {
	// CacheHit: a command found its aggregate in memory.
	CacheHit()
	// ColdLoad: an aggregate was loaded from its snapshot and the events
	// after it, which took elapsed.
	ColdLoad(elapsed time.Duration)
	// Retry: an append lost an optimistic-concurrency race and the command
	// is decided again on the newer state.
	Retry()
	// GaveUp: a command lost MaxAttempts races and answered a conflict.
	GaveUp()
}

type noStoreMetrics struct{}

func (noStoreMetrics) CacheHit()              {}
func (noStoreMetrics) ColdLoad(time.Duration) {}
func (noStoreMetrics) Retry()                 {}
func (noStoreMetrics) GaveUp()                {}

// Result is what an executed command appended. Seq is the log position the
// caller's next read must reflect; with no events it is the aggregate's
// current position.
type Result struct {
	Seq    uint64
	Events []events.Event
	// Earlier are the events of this decision that an earlier attempt of
	// the same request appended (see ExecuteAgain), as the log holds them,
	// with their positions; they are not appended again, and not in Events.
	Earlier []events.Event
}

// Store runs commands against aggregates of one kind. Commands on one
// aggregate are serialised in-process, so racing requests do not burn
// optimistic retries against each other; across processes the log's
// expected-sequence check keeps them consistent.
type Store[A Aggregate] struct {
	log   Log
	snaps Snapshots
	fresh func() A
	cfg   StoreConfig

	seed  maphash.Seed
	locks [256]sync.Mutex

	mu     sync.Mutex
	cache  map[string]*list.Element
	lru    list.List // of *cached[A], most recent first
	cached int       // bytes of the aggregates in the cache
}

// Sizer is an aggregate that knows roughly how many bytes it holds, for
// the cache's budget.
type Sizer interface{ Size() int }

func sizeOf(a Aggregate) int {
	if s, ok := a.(Sizer); ok {
		return s.Size()
	}
	return 256
}

type cached[A Aggregate] struct {
	key  string
	size int // bytes counted in Store.cached
	agg  A
	seq  uint64 // last event applied
	// sinceSnap counts the events applied after the newest snapshot known.
	// Sequences cannot tell it: they number the whole stream, in which one
	// aggregate's events lie far apart.
	sinceSnap uint64
}

// NewStore returns a Store whose empty aggregates come from fresh.
func NewStore[A Aggregate](log Log, snaps Snapshots, fresh func() A, cfg StoreConfig) (*Store[A], error) {
	if log == nil || snaps == nil || fresh == nil {
		return nil, errors.New("commands: NewStore needs a log, a snapshot store and a constructor")
	}
	if cfg.Name == "" {
		return nil, errors.New("commands: NewStore needs a name")
	}
	if cfg.SnapshotEvery == 0 {
		cfg.SnapshotEvery = 100
	}
	if cfg.CacheBytes <= 0 {
		cfg.CacheBytes = 64 << 20
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noStoreMetrics{}
	}
	return &Store[A]{log: log, snaps: snaps, fresh: fresh, cfg: cfg, seed: maphash.MakeSeed(), cache: map[string]*list.Element{}}, nil
}

// Decide inspects an aggregate and returns the events a command appends
// (none for a no-op), or an error. It must not modify the aggregate: it may
// run again on newer state when another writer won a race.
//
// The events are appended one at a time, in order, so every prefix of them
// must be a valid history: a failure can leave only a prefix in the log, and
// the command is then decided again on the state that prefix made. The last
// event completes the command: a retry (ExecuteAgain) that finds it in the
// log appends nothing. (An atomic
// batch would avoid that, but on a single-replica file stream JetStream
// stages each batch in a freshly synced file store, which costs hundreds of
// single appends.)
type Decide[A Aggregate] func(A) ([]events.Event, error)

// Execute loads the aggregate on subject, decides, and appends.
func (s *Store[A]) Execute(ctx context.Context, subject string, decide Decide[A]) (Result, error) {
	return s.execute(ctx, subject, decide, false, position{})
}

// position is what a caller saw of the log, which the append must find
// unchanged (ExecuteAt, ExecuteAfter): the stream's last position at, or
// the last event of guard's subjects at guardSeq. None: the aggregate's
// own expected sequence only.
type position struct {
	at       uint64
	guard    string
	guardSeq uint64
}

// ExecuteAt is Execute for a caller that has seen subject's stream up to
// position at and answers with what it saw: the append expects the stream
// there, and each further event of the decision the one before. When the
// stream has moved on it appends no more and answers events.ErrLogMoved,
// and the caller, which can no longer trust what it saw, goes the long way
// (Execute; a prefix appended stays, as after any failed append). A
// decision that appends nothing checks no position: its Result has no
// Events.
func (s *Store[A]) ExecuteAt(ctx context.Context, subject string, at uint64, decide Decide[A]) (Result, error) {
	return s.execute(ctx, subject, decide, false, position{at: at})
}

// ExecuteAfter is Execute for a caller whose decision rests on what the
// subjects guard matches held up to their last event at guardSeq (a
// workspace's holidays, for its budget), read before it: the append
// expects them there, in place of the aggregate's own expected sequence
// (the aggregate is caught up before it decides). When they have moved on
// it appends nothing and answers events.ErrLogMoved, and the caller reads
// again. For a decision of one event (a creation). With again, it is
// ExecuteAgain on that condition.
func (s *Store[A]) ExecuteAfter(ctx context.Context, subject, guard string, guardSeq uint64, again bool, decide Decide[A]) (Result, error) {
	return s.execute(ctx, subject, decide, again, position{guard: guard, guardSeq: guardSeq})
}

// ExecuteAgain is Execute for a command that ran before and may have
// appended (its request is retried under the same Idempotency-Key after a
// failure or a crash): an event whose id is already among the subject's
// events is not appended again. The log's duplicate window covers a retry
// that comes soon; this covers one that comes later, when another write
// has moved the aggregate on and the command, decided again, would append
// its event a second time. It reads the subject's history, which only such
// retries pay.
func (s *Store[A]) ExecuteAgain(ctx context.Context, subject string, decide Decide[A]) (Result, error) {
	return s.execute(ctx, subject, decide, true, position{})
}

func (s *Store[A]) execute(ctx context.Context, subject string, decide Decide[A], again bool, at position) (Result, error) {
	l := &s.locks[maphash.String(s.seed, subject)%uint64(len(s.locks))]
	l.Lock()
	defer l.Unlock()

	c, cached, err := s.load(ctx, subject)
	if err != nil {
		return Result{}, err
	}
	if at.guard != "" && cached {
		// The guard takes the place of the subject's expected sequence,
		// which would catch a cache that missed another instance's append;
		// the guard proves only that the log has not moved since the
		// caller read it. So a cached aggregate is caught up first (one
		// just read from the log is current).
		if _, err := s.current(ctx, c); err != nil {
			return Result{}, err
		}
	}
	var inLog map[string]events.Event
	if again {
		if inLog, err = s.ids(ctx, c.key); err != nil {
			return Result{}, err
		}
	}
	var appended, earlier []events.Event
	for attempt := 1; ; attempt++ {
		evs, err := decide(c.agg)
		if inLog != nil {
			// When the decision's last event is in the log, the earlier
			// attempt got all of it through: what the decision adds now,
			// on state that moved on (a send's overflow deletion of another
			// notification), is not what the request asked.
			done := completed(evs, inLog)
			earlier = earlier[:0]
			evs = slices.DeleteFunc(evs, func(e events.Event) bool {
				prior, ok := inLog[e.ID]
				if ok {
					earlier = append(earlier, prior)
				}
				return ok || done
			})
		}
		if err != nil || len(evs) == 0 {
			// A refusal or a no-op appends nothing, so no expected-sequence
			// check would notice a cache that another instance's append made
			// stale: make sure the state is current before answering.
			if current, cerr := s.current(ctx, c); cerr != nil {
				return Result{}, cerr
			} else if !current {
				if attempt >= s.cfg.MaxAttempts {
					return Result{}, s.gaveUp()
				}
				continue
			}
			if err == nil {
				// The answer rests on events an earlier attempt appended
				// (or another request, not answered yet), whose fsync may
				// have failed: it promises what an append's would.
				if derr := s.log.Durable(ctx, c.key, c.seq); derr != nil {
					return Result{}, unavailable(derr)
				}
			}
			return Result{Seq: c.seq, Events: appended, Earlier: earlier}, err
		}
		raced, err := s.appendEach(ctx, c, at, evs, &appended, &earlier)
		if err != nil {
			return Result{}, err
		}
		if !raced {
			s.remember(c)
			s.maybeSnapshot(ctx, c)
			return Result{Seq: c.seq, Events: appended, Earlier: earlier}, nil
		}
		if attempt >= s.cfg.MaxAttempts {
			return Result{}, s.gaveUp()
		}
	}
}

// gaveUp is the answer of a command that lost MaxAttempts races.
func (s *Store[A]) gaveUp() error {
	s.cfg.Metrics.GaveUp()
	return &Error{Code: EConflict, Message: "The item is being changed by someone else; try again.", Err: events.ErrConflict}
}

// completed reports whether the log has the last of a decision's events:
// then an earlier attempt of the command appended all of them.
func completed(evs []events.Event, inLog map[string]events.Event) bool {
	if len(evs) == 0 {
		return false
	}
	_, ok := inLog[evs[len(evs)-1].ID]
	return ok
}

// ids returns the events on subject by id. The cached state need not be
// caught up here: a decision on stale state loses its expected-sequence
// check, or, appending nothing, is checked by current, and is decided again.
func (s *Store[A]) ids(ctx context.Context, subject string) (map[string]events.Event, error) {
	ids := map[string]events.Event{}
	if _, err := s.log.Read(ctx, subject, 0, func(e events.Event) error {
		ids[e.ID] = e
		return nil
	}); err != nil {
		return nil, ReadFailed(fmt.Errorf("read %s: %w", subject, err))
	}
	return ids, nil
}

// appendEach appends evs one by one on c, applying each; an event the log
// already has from an earlier attempt goes to earlier. raced reports that
// another writer moved the log under the command: c is then caught up and
// the command must be decided again.
func (s *Store[A]) appendEach(ctx context.Context, c *cached[A], at position, evs []events.Event, appended, earlier *[]events.Event) (raced bool, err error) {
	if at.guard != "" && len(evs) > 1 {
		// Its second event would find the guard moved by its first.
		return false, fmt.Errorf("append to %s: a guarded decision of %d events", c.key, len(evs))
	}
	for i, e := range evs {
		var last uint64
		var err error
		switch {
		case at.guard != "":
			last, err = s.log.AppendAfter(ctx, c.key, at.guard, at.guardSeq, e)
		case at.at != 0:
			last, err = s.log.AppendAt(ctx, c.key, c.seq, at.at, e)
		default: // the plain append, as every Log (and its wrappers) has it
			last, err = s.log.Append(ctx, c.key, c.seq, e)
		}
		if errors.Is(err, events.ErrLogMoved) {
			// Nothing appended, and the cache is caught up by the long
			// way's own expected-sequence check, if the subject moved.
			return false, err
		}
		if errors.Is(err, events.ErrConflict) || errors.Is(err, events.ErrAlreadyAppended) {
			if _, err := s.current(ctx, c); err != nil {
				return false, err
			}
			if errors.Is(err, events.ErrConflict) {
				s.cfg.Metrics.Retry()
				return true, nil
			}
			// This very event (ids are unique to a command, or derived from
			// its idempotency key) is in the log: an earlier attempt of the
			// same request got it through. It happened; having read it, go
			// on. Deciding again could never converge, since the decision
			// would name the same id again.
			e.Seq = last
			*earlier = append(*earlier, e)
			if c.seq != last && i < len(evs)-1 {
				// Another writer appended after it (a replicated stream
				// checks the id before the expected sequence, so a retry
				// whose ack was lost is told "duplicate" even then): the
				// rest was decided on state that has moved on. Decide
				// again, on state that holds this event.
				s.cfg.Metrics.Retry()
				return true, nil
			}
			continue
		}
		if err != nil {
			// An append that failed may still have happened; the state is
			// re-read from the log next time.
			s.forget(c.key)
			return false, unavailable(fmt.Errorf("append to %s: %w", c.key, err))
		}
		e.Seq = last
		if err := c.agg.Apply(e); err != nil {
			s.forget(c.key)
			return false, fmt.Errorf("apply own event %s: %w", e.Type, err)
		}
		c.seq = last
		c.sinceSnap++
		*appended = append(*appended, e)
		if at.at != 0 {
			at.at = last // the next event expects the stream at this one
		}
	}
	return false, nil
}

// current reports whether c holds every event of its subject, and when
// not, catches it up.
func (s *Store[A]) current(ctx context.Context, c *cached[A]) (bool, error) {
	last, err := s.log.LastSeq(ctx, c.key)
	if err != nil {
		s.forget(c.key)
		return false, unavailable(fmt.Errorf("last sequence of %s: %w", c.key, err))
	}
	if last == c.seq {
		return true, nil
	}
	if last < c.seq {
		// The subject's events were erased (a workspace's erasure, its
		// snapshots with them): what c holds is gone, start again.
		c.agg, c.seq, c.sinceSnap = s.fresh(), 0, 0
	}
	if err := s.catchUp(ctx, c); err != nil {
		s.forget(c.key)
		return false, err
	}
	s.remember(c)
	return false, nil
}

// Load returns a copy-free view of the aggregate on subject for read-only
// use, such as answering with the state a command left behind.
func (s *Store[A]) Load(ctx context.Context, subject string, read func(A, uint64) error) error {
	l := &s.locks[maphash.String(s.seed, subject)%uint64(len(s.locks))]
	l.Lock()
	defer l.Unlock()
	c, _, err := s.load(ctx, subject)
	if err != nil {
		return err
	}
	return read(c.agg, c.seq)
}

// load returns the aggregate on subject, and whether it came from the
// cache rather than the log.
func (s *Store[A]) load(ctx context.Context, subject string) (*cached[A], bool, error) {
	s.mu.Lock()
	if el, ok := s.cache[subject]; ok {
		s.lru.MoveToFront(el)
		s.mu.Unlock()
		s.cfg.Metrics.CacheHit()
		return el.Value.(*cached[A]), true, nil
	}
	s.mu.Unlock()

	start := time.Now()
	c := &cached[A]{key: subject, agg: s.fresh()}
	seq, data, err := s.snaps.Load(ctx, s.snapshotKey(subject))
	if err != nil {
		// A snapshot is an optimisation: without one, read the log.
		s.cfg.Logger.Warn("load snapshot", "subject", subject, "err", err)
	} else if seq > 0 {
		if err := json.Unmarshal(data, c.agg); err != nil {
			s.cfg.Logger.Warn("decode snapshot", "subject", subject, "err", err)
			c.agg = s.fresh()
		} else {
			c.seq = seq
		}
	}
	if err := s.catchUp(ctx, c); err != nil {
		return nil, false, err
	}
	s.remember(c)
	s.cfg.Metrics.ColdLoad(time.Since(start))
	return c, false, nil
}

func (s *Store[A]) catchUp(ctx context.Context, c *cached[A]) error {
	last, err := s.log.Read(ctx, c.key, c.seq, func(e events.Event) error {
		c.sinceSnap++
		return c.agg.Apply(e)
	})
	if err != nil {
		return ReadFailed(fmt.Errorf("read %s after %d: %w", c.key, c.seq, err))
	}
	c.seq = last
	return nil
}

func (s *Store[A]) remember(c *cached[A]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.cache[c.key]; ok {
		s.cached -= el.Value.(*cached[A]).size
		el.Value = c
		s.lru.MoveToFront(el)
	} else {
		s.cache[c.key] = s.lru.PushFront(c)
	}
	c.size = sizeOf(c.agg)
	s.cached += c.size
	for s.cached > s.cfg.CacheBytes && s.lru.Len() > 1 {
		old := s.lru.Remove(s.lru.Back()).(*cached[A])
		delete(s.cache, old.key)
		s.cached -= old.size
	}
}

func (s *Store[A]) forget(subject string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.cache[subject]; ok {
		s.cached -= s.lru.Remove(el).(*cached[A]).size
		delete(s.cache, subject)
	}
}

func (s *Store[A]) maybeSnapshot(ctx context.Context, c *cached[A]) {
	if c.sinceSnap < s.cfg.SnapshotEvery {
		return
	}
	data, err := json.Marshal(c.agg)
	if err == nil {
		err = s.snaps.Save(ctx, s.snapshotKey(c.key), c.seq, data)
	}
	if err != nil {
		s.cfg.Logger.Warn("save snapshot", "subject", c.key, "err", err)
		return
	}
	c.sinceSnap = 0
}

func (s *Store[A]) snapshotKey(subject string) string { return s.cfg.Name + "." + subject }

func unavailable(err error) error {
	return &Error{Code: EUnavailable, Message: "The service is temporarily unavailable; try again.", Err: err}
}

// ReadFailed is the error of events the log did not give whole. A log
// that did not answer is worth a retry (EUnavailable), and so is an event
// of a type or version this build does not know: a newer build wrote it,
// and a retry may reach one. An event that no build can read
// (events.ErrMalformed) reads no better later, where a 503 would have
// clients retry for good: EInternal, whose cause goes to the log only.
func ReadFailed(err error) error {
	if errors.Is(err, events.ErrMalformed) {
		return &Error{Code: EInternal, Err: err}
	}
	return unavailable(err)
}
