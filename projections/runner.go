package projections

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"astro/events"
	"astro/events/natslog"
)

// Projector turns events into read-model rows.
type Projector interface {
	// Name identifies the projector's checkpoint and durable consumer.
	Name() string
	// Subjects are the log subjects it consumes.
	Subjects() []string
	// Apply applies a batch of events, in log order, inside tx.
	Apply(ctx context.Context, tx *sqlx.Tx, evs []events.Event) error
}

// RunnerConfig tunes a Runner.
type RunnerConfig struct {
	Stream string // the event stream's name
	Batch  int    // most events per transaction; default 500
	// Linger is how long a batch may wait for more events while no read
	// is waiting for it, so that a steady trickle of writes costs a
	// transaction every Linger instead of one per event. A read that needs
	// the read model to reach a position ends the wait at once. Default
	// 10ms; negative: never wait.
	Linger time.Duration
	// AckWait is how long the log waits for a delivery's acknowledgement
	// before it delivers again. A delivery lost in flight (a pull ended by
	// a reconnect) that is the last one shows no gap to the runner, so
	// only the redelivery brings it: the read model misses that event for
	// this long. The runner acknowledges each batch as soon as it commits,
	// and skips what it has applied. Default 10s.
	AckWait time.Duration
	// Parking, when set, takes the events the projector cannot apply, so
	// they do not stop it; without it such an event is retried forever.
	Parking Parking
	Logger  *slog.Logger
	// Metrics, when set, is told of every batch applied and event parked.
	Metrics RunnerMetrics
	Now     func() time.Time // the clock lag is measured by; default time.Now
	// Tracer, when set, traces each batch as a consumer span: a child of
	// the trace of its first event that carries one, linked to every
	// event's trace. nil costs nothing.
	Tracer trace.Tracer
	// Watch, when set, is told of every delivery as it arrives, before
	// the read model has it.
	Watch Watcher
}

// Watcher follows what a runner's consumer delivers, in delivery order.
type Watcher interface {
	// Started: deliveries start after stream position from, the
	// consumer having delivered delivered (its own sequence). It returns
	// the token of these deliveries.
	Started(from, delivered uint64) (token uint64)
	// Delivered: the event on subject at stream position seq, the
	// consumer's delivery dseq, first unless a redelivery. A call with
	// the token of deliveries that stopped (a callback still running as
	// its consumer stops) is late, and must be ignored.
	Delivered(token uint64, subject string, seq, dseq uint64, first bool)
	// Stopped: deliveries stopped.
	Stopped()
}

// RunnerMetrics is what a runner reports as it applies the log.
type RunnerMetrics interface {
	// Applied: a batch of size events was committed, in elapsed.
	Applied(size int, elapsed time.Duration)
	// Parked: n events were parked.
	Parked(n int)
}

type noRunnerMetrics struct{}

func (noRunnerMetrics) Applied(int, time.Duration) {}
func (noRunnerMetrics) Parked(int)                 {}

// Runner feeds one projector from the log.
type Runner struct {
	js  jetstream.JetStream
	db  *sqlx.DB
	p   Projector
	cfg RunnerConfig

	parked    atomic.Int64  // events parked since start
	following atomic.Bool   // another instance writes; pos comes from its checkpoint
	waiting   atomic.Int64  // reads waiting in WaitFor
	wake      chan struct{} // a read started waiting: stop lingering

	created       string // identity of the stream being consumed (see checkpoint)
	startRedriven bool   // what was parked was redriven, without error, since Run began

	mu      sync.Mutex
	pos     uint64        // checkpoint: last applied stream sequence
	ready   bool          // consuming, or following the instance that is
	state   State         // see State
	changed chan struct{} // closed and replaced when pos moves
}

// NewRunner returns a runner of p.
func NewRunner(js jetstream.JetStream, db *sqlx.DB, p Projector, cfg RunnerConfig) (*Runner, error) {
	if js == nil || db == nil || p == nil || cfg.Stream == "" {
		return nil, errors.New("projections: NewRunner needs JetStream, a database, a projector and a stream name")
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 500
	}
	if cfg.Linger == 0 {
		cfg.Linger = 10 * time.Millisecond
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noRunnerMetrics{}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Logger = cfg.Logger.With("projector", p.Name())
	return &Runner{js: js, db: db, p: p, cfg: cfg, state: StateStarting, changed: make(chan struct{}), wake: make(chan struct{}, 1)}, nil
}

// State is what the runner does: StateStarting, StateRunning,
// StateStandby, StateRebuilding or StateDiverged.
func (r *Runner) State() State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state
}

func (r *Runner) setState(state State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state = state
}

// version is the projector's version; 1 for one that does not say.
func (r *Runner) version() int {
	if m, ok := r.p.(Model); ok {
		return m.Version()
	}
	return 1
}

// Name is the projector's name.
func (r *Runner) Name() string { return r.p.Name() }

// Ready reports whether the runner is consuming the log, or following the
// checkpoint of the instance that is.
func (r *Runner) Ready() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ready
}

// Parked is how many events this runner parked since it started.
func (r *Runner) Parked() int64 { return r.parked.Load() }

// Position is the last stream sequence applied.
func (r *Runner) Position() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pos
}

// WaitFor blocks until the read model reflects stream sequence seq, or ctx
// ends. It is how a read keeps every answered write in view.
func (r *Runner) WaitFor(ctx context.Context, seq uint64) error {
	if r.Position() >= seq {
		return nil
	}
	r.waiting.Add(1)
	defer r.waiting.Add(-1)
	if r.following.Load() {
		return r.followTo(ctx, seq)
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
	r.mu.Lock()
	for r.pos < seq {
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("projector %s at %d, waiting for %d: %w", r.p.Name(), r.Position(), seq, ctx.Err())
		}
		r.mu.Lock()
	}
	r.mu.Unlock()
	return nil
}

// followTo waits for the writing instance's checkpoint to reach seq,
// asking the database at once and then at growing intervals: the write
// was answered when it reached the log, so the projector is usually a few
// milliseconds from it.
func (r *Runner) followTo(ctx context.Context, seq uint64) error {
	for wait := time.Millisecond; r.Position() < seq; wait = min(2*wait, 50*time.Millisecond) {
		pos, err := r.checkpoint(ctx)
		if err == nil {
			r.advance(pos)
			if pos >= seq {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("projector %s at %d, waiting for %d: %w", r.p.Name(), r.Position(), seq, ctx.Err())
		case <-time.After(wait):
		}
	}
	return nil
}

func (r *Runner) advance(pos uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pos > r.pos {
		r.pos = pos
		close(r.changed)
		r.changed = make(chan struct{})
	}
}

// Run applies the log until ctx ends. One runner per projector and
// database writes at a time: the runner that holds the projector's
// PostgreSQL advisory lock consumes; any other (another instance) stands
// by, follows the checkpoint so its WaitFor still works, and takes over when
// the lock comes free.
func (r *Runner) Run(ctx context.Context) error {
	for {
		lock, err := r.lock(ctx)
		if err != nil {
			return err
		}
		if lock == nil {
			return nil // ctx ended while standing by
		}
		watching, stopWatching := context.WithCancel(ctx)
		err = r.consume(ctx, r.watchLock(watching, lock))
		stopWatching()
		release(lock)
		r.setReady(false)
		if ctx.Err() != nil {
			return nil
		}
		r.cfg.Logger.Error("projector stopped, restarting", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// lock waits for the projector's advisory lock, following the checkpoint
// meanwhile. It returns the connection holding the lock, or nil when ctx
// ended.
func (r *Runner) lock(ctx context.Context) (*sqlx.Conn, error) {
	key := lockKey(r.p.Name())
	// Through a database outage the attempts back off, and each error is
	// logged when it first comes: every 50 ms, they dialled the database
	// and wrote a warning twenty times a second per projector.
	const poll, maxWait = 50 * time.Millisecond, 5 * time.Second
	wait, lastErr := poll, ""
	var follow standbyCheck
	for logged := false; ; {
		conn, err := r.db.Connx(ctx)
		if err == nil {
			var got bool
			if err = conn.GetContext(ctx, &got, `SELECT pg_try_advisory_lock(hashtext($1))`, key); err == nil && got {
				// A writer cut off from the database (a network fault, a
				// machine gone) resets nothing: PostgreSQL would keep its
				// session, and the lock, until TCP gives up, hours later.
				// The session ends once idle this long (watchLock pings it
				// every second), and another instance takes over. Before
				// PostgreSQL 14 the setting is unknown: the lock is kept as
				// it was.
				if _, err := conn.ExecContext(ctx, `SET idle_session_timeout = '`+lockIdle+`'`); err != nil {
					r.cfg.Logger.Debug("projector lock: no idle_session_timeout", "err", err)
				}
				r.following.Store(false)
				return conn, nil
			}
			conn.Close()
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		if err != nil {
			if err.Error() != lastErr {
				r.cfg.Logger.Warn("projector lock", "err", err)
				lastErr = err.Error()
			}
			wait = min(2*wait, maxWait)
		} else {
			wait, lastErr = poll, ""
			if !logged {
				r.cfg.Logger.Info("projector runs in another instance; following its checkpoint")
				logged = true
			}
		}
		if c, err := readCheckpoint(ctx, r.db, "projector_checkpoints", r.p.Name()); err == nil {
			r.reset(c.Seq) // back too, after a rebuild of the writing instance
			r.following.Store(true)
			if why := follow.diverged(ctx, r, c); why != "" {
				r.setReady(false)
				r.setState(StateDiverged)
			} else {
				r.setReady(true)
				r.setState(StateStandby)
			}
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(wait):
		}
	}
}

// release gives up a session advisory lock (a projector's, a rebuild's)
// by ending the session that holds it. Given back to the pool, the
// connection would keep the lock: a runner starting again would draw
// another connection, find the lock taken by its own old session and
// follow its own stalled checkpoint; a second rebuild would find one
// running.
func release(lock *sqlx.Conn) {
	_ = lock.Raw(func(any) error { return driver.ErrBadConn }) // the pool closes it, not keeps it
	_ = lock.Close()
}

func (r *Runner) checkpoint(ctx context.Context) (uint64, error) {
	var pos uint64
	err := r.db.GetContext(ctx, &pos, `SELECT COALESCE((SELECT seq FROM projector_checkpoints WHERE name = $1), 0)`, r.p.Name())
	if err != nil {
		return 0, fmt.Errorf("projector %s: read checkpoint: %w", r.p.Name(), err)
	}
	return pos, nil
}

// RedriveSubject is where `astro events redrive` asks a projector to apply
// its parked events again.
func RedriveSubject(projector string) string { return "astro.admin.redrive." + projector }

// RedriveResult answers a redrive request.
type RedriveResult struct {
	Projector string `json:"projector"`
	Applied   int    `json:"applied"`
	Parked    int    `json:"parked"` // still parked
	Error     string `json:"error,omitempty"`
}

func (r *Runner) answerRedrive(ctx context.Context, req *nats.Msg) {
	body, _ := json.Marshal(r.redriveAll(ctx))
	if err := req.Respond(body); err != nil {
		r.cfg.Logger.Warn("redrive reply", "err", err)
	}
}

// redriveAll applies the parked events that can be applied now, and tells
// every instance when that changed the read model.
func (r *Runner) redriveAll(ctx context.Context) RedriveResult {
	applied, left, changed, err := r.redrive(ctx)
	res := RedriveResult{Projector: r.p.Name(), Applied: applied, Parked: left}
	if err != nil {
		res.Error = err.Error()
		if ctx.Err() == nil { // else a shutdown cut it short
			r.cfg.Logger.Error("redrive", "err", err)
		}
	}
	if applied+left > 0 {
		r.cfg.Logger.Info("redrive", "applied", applied, "still_parked", left)
	}
	if changed {
		if err := r.js.Conn().Publish(RedrivenSubject(r.p.Name()), nil); err != nil {
			r.cfg.Logger.Warn("redrive: announce", "err", err)
		}
	}
	return res
}

func (r *Runner) setReady(ready bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ready = ready
}

// consume applies batches while lock is held. A batch that fails is rolled
// back and tried again after a pause; the checkpoint never moves past an
// event that was not applied.
func (r *Runner) consume(ctx context.Context, lost <-chan error) error {
	// One lookup, whose info check reads too: after a node is lost every
	// request to the log may wait out requestTimeout.
	stream, err := request(ctx, func(ctx context.Context) (jetstream.Stream, error) { return r.js.Stream(ctx, r.cfg.Stream) })
	if err != nil {
		return fmt.Errorf("projector %s: stream: %w", r.p.Name(), err)
	}
	upgrade, err := r.check(ctx, stream)
	if err != nil {
		return err
	}
	pos, err := r.checkpoint(ctx)
	if err != nil {
		return err
	}
	// Where the database says, even behind where this runner was: restored
	// to an older checkpoint, or moved back by a rebuild of another
	// instance while this one followed, it is behind, and the events after
	// it must be applied again, not skipped as applied.
	r.reset(pos)
	cons, err := r.consumer(ctx, stream, pos)
	if err != nil {
		return err
	}
	delivered := cons.CachedInfo().Delivered.Consumer
	// The consumer's work ends with ctx, or with the lock (its cause).
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r.setState(StateRunning)
	if upgrade != nil {
		go upgrade(ctx)
	}
	msgs := make(chan jetstream.Msg, 2*r.cfg.Batch)
	var silent atomic.Int32 // pulls in a row that met no heartbeat or no consumer
	stalled := make(chan error, 1)
	var token uint64
	if w := r.cfg.Watch; w != nil {
		token = w.Started(pos, delivered)
		defer w.Stopped()
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		silent.Store(0)
		if w := r.cfg.Watch; w != nil {
			if meta, err := m.Metadata(); err == nil {
				w.Delivered(token, m.Subject(), meta.Sequence.Stream, meta.Sequence.Consumer, meta.NumDelivered == 1)
			}
		}
		select {
		case msgs <- m:
		case <-ctx.Done():
		}
	}, jetstream.PullMaxMessages(r.cfg.Batch),
		// Short pulls and heartbeats: after a leader change the client notices
		// a dead pull in seconds, not the default 30.
		jetstream.PullExpiry(5*time.Second), jetstream.PullHeartbeat(time.Second),
		jetstream.ConsumeErrHandler(r.watchStall(&silent, stalled)))
	if err != nil {
		return fmt.Errorf("projector %s: consume: %w", r.p.Name(), err)
	}
	defer cc.Stop()
	// A lost lock stops the pulls and the batch under way at once, even
	// one waiting on a database that answers nothing: another instance is
	// taking over, and what this one's pulls took would reach it only
	// after AckWait.
	go func() {
		select {
		case err := <-lost:
			cancel(err)
			cc.Stop()
		case <-ctx.Done():
		}
	}()
	if r.cfg.Parking != nil && !r.startRedriven {
		// Until one succeeds: in a rolling deploy, an older build parks
		// the events of types only the newer one appends, and they are
		// applied when a newer build takes the projector over, with no one
		// to ask. Under the lock's watch, as a batch is: a lost lock ends it.
		r.startRedriven = r.redriveAll(ctx).Error == ""
	}
	r.setReady(true)
	r.cfg.Logger.Info("projector running", "from", pos+1)

	// Redrives run here, between batches, from the instance that writes.
	redrives := make(chan *nats.Msg, 4)
	if r.cfg.Parking != nil {
		sub, err := r.js.Conn().ChanSubscribe(RedriveSubject(r.p.Name()), redrives)
		if err != nil {
			return fmt.Errorf("projector %s: redrive subscription: %w", r.p.Name(), err)
		}
		defer sub.Unsubscribe()
	}

	batch := make([]jetstream.Msg, 0, r.cfg.Batch)
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			return context.Cause(ctx) // the lock lost, or Run's end (which Run knows)
		case err := <-stalled:
			return err
		case <-cc.Closed():
			if ctx.Err() != nil {
				return context.Cause(ctx) // closed for it
			}
			// Consume ends by itself when the consumer is deleted (as
			// another instance resetting it does) or the connection closes.
			return fmt.Errorf("projector %s: consumer closed", r.p.Name())
		case req := <-redrives:
			r.answerRedrive(ctx, req)
			continue
		case m := <-msgs:
			batch = append(batch, m)
		}
		batch = r.fill(ctx, msgs, batch)
		var gap error
		batch, delivered, gap = contiguous(batch, delivered)
		if err := r.applyRetrying(ctx, batch); err != nil {
			return err
		}
		if gap != nil {
			return fmt.Errorf("projector %s: %w", r.p.Name(), gap)
		}
	}
}

// watchStall is the consumer's error handler. The client pulls again after
// each error, for ever: a consumer lost with a node would stall the read
// model without an error. After maxSilentPulls pulls in a row that met no
// heartbeat or no consumer (silent, which a delivery resets), it signals
// stalled, which the runner reads between batches.
func (r *Runner) watchStall(silent *atomic.Int32, stalled chan<- error) jetstream.ConsumeErrHandlerFunc {
	return func(_ jetstream.ConsumeContext, err error) {
		r.cfg.Logger.Debug("consume", "err", err)
		if !errors.Is(err, jetstream.ErrNoHeartbeat) && !errors.Is(err, nats.ErrNoResponders) {
			return
		}
		if silent.Add(1) != maxSilentPulls {
			return
		}
		// A stall signalled and not read yet (a batch retrying through a
		// database outage) ends the runner all the same. Waiting to signal
		// a second would hold the client's goroutine that calls this, and
		// with it the pulls, and for good once the runner has ended.
		select {
		case stalled <- fmt.Errorf("projector %s: consumer silent for %d pulls in a row (last: %w)", r.p.Name(), maxSilentPulls, err):
		default:
		}
	}
}

// maxSilentPulls ends a consumer whose pulls meet neither a heartbeat nor
// a consumer this many times in a row: about 20 s, past a leader election.
const maxSilentPulls = 10

// lockIdle is how long the session holding a projector's lock may go
// without a word before PostgreSQL ends it, and lockPingTimeout how long
// the writer waits for its ping: a writer that cannot reach the database
// for that long stops writing, and another instance takes over.
const (
	lockIdle        = "15s"
	lockPingTimeout = 10 * time.Second
)

// watchLock pings the connection that holds the projector's lock, from
// the moment it is taken: losing the connection loses the lock, and the
// channel then says so, so that the runner stops writing at once.
func (r *Runner) watchLock(ctx context.Context, lock *sqlx.Conn) <-chan error {
	lost := make(chan error, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			if err := r.ping(ctx, lock); err != nil && ctx.Err() == nil {
				lost <- fmt.Errorf("projector %s: lock connection lost: %w", r.p.Name(), err)
				return
			}
		}
	}()
	return lost
}

// ping pings the lock's connection, failing after lockPingTimeout even
// when the ping itself has not returned. A pool opened by pgconn ends the
// ping with its context; on one opened with lib/pq alone, the ping on a
// link that answers nothing (cut by a network fault, not reset) waits for
// the server until TCP gives up, and the runner takes any pool. The ping
// left waiting ends with the connection.
func (r *Runner) ping(ctx context.Context, lock *sqlx.Conn) error {
	answered := make(chan error, 1)
	go func() {
		ping, cancel := context.WithTimeout(ctx, lockPingTimeout)
		defer cancel()
		answered <- lock.PingContext(ping)
	}()
	select {
	case err := <-answered:
		return err
	case <-time.After(lockPingTimeout):
		return fmt.Errorf("no answer in %v", lockPingTimeout)
	}
}

// applyRetrying applies batch until it succeeds: a failure here is a
// passing one (the database is down), since what cannot be applied at all
// is parked. It gives up only when ctx ends (the lock lost with it).
func (r *Runner) applyRetrying(ctx context.Context, batch []jetstream.Msg) error {
	for wait := 100 * time.Millisecond; len(batch) > 0; wait = min(2*wait, 30*time.Second) {
		err := r.apply(ctx, batch)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errCheckpointMoved) {
			return err // again from the checkpoint, once the lock is ours
		}
		r.cfg.Logger.Error("apply batch failed, will retry", "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	return nil
}

// contiguous cuts batch before the first message that does not follow the
// last one delivered (by the consumer's own sequence). A delivery lost in
// flight, as when a stream's leader dies between sending a message and
// the next, leaves such a gap; the next acknowledgement (AckAll) would
// cover the lost event, and the checkpoint then skip it for good. A gap
// ends the consumer instead: the runner starts again from its checkpoint,
// and the consumer, having delivered past it, is placed back there.
// Redeliveries are not new deliveries and are let through.
func contiguous(batch []jetstream.Msg, delivered uint64) ([]jetstream.Msg, uint64, error) {
	for i, m := range batch {
		meta, err := m.Metadata()
		if err != nil {
			return batch, delivered, nil // apply reports it
		}
		dseq := meta.Sequence.Consumer
		if meta.NumDelivered == 1 && dseq != delivered+1 {
			// Backwards (a restarted server's consumer state was behind
			// what it had sent) is no loss, but it is no order either.
			return batch[:i], delivered, fmt.Errorf("delivery %d came after %d: deliveries are not contiguous, starting again from the checkpoint", dseq, delivered)
		}
		delivered = max(delivered, dseq)
	}
	return batch, delivered, nil
}

// fill adds to batch what else is already here, then what comes within
// Linger while no read waits: batches grow under load, and a trickle of
// writes is not one transaction each.
func (r *Runner) fill(ctx context.Context, msgs <-chan jetstream.Msg, batch []jetstream.Msg) []jetstream.Msg {
	var linger <-chan time.Time
	for len(batch) < r.cfg.Batch {
		select {
		case m := <-msgs:
			batch = append(batch, m)
			continue
		default:
		}
		if r.cfg.Linger < 0 || r.waiting.Load() > 0 {
			return batch
		}
		if linger == nil {
			t := time.NewTimer(r.cfg.Linger)
			defer t.Stop()
			linger = t.C
		}
		select {
		case m := <-msgs:
			batch = append(batch, m)
		case <-r.wake:
		case <-linger:
			return batch
		case <-ctx.Done():
			return batch
		}
	}
	return batch
}

// requestTimeout bounds each JetStream request that sets a runner up. A
// cluster that lost a node elects new stream and consumer leaders, and
// answers nothing meanwhile: waiting out the client's 5 s for a request,
// then the restart's pause, would leave the read model behind for seconds
// after the election.
const requestTimeout = 2 * time.Second

// request runs one JetStream request of the set-up, bounded by
// requestTimeout.
func request[T any](ctx context.Context, do func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return do(ctx)
}

// consumer returns the projector's durable consumer, placed right after
// the checkpoint. The checkpoint in PostgreSQL is the truth: a consumer
// that has delivered past it (a crash between delivery and commit, or a
// restored database) is moved back to it. One made with another AckWait
// or other subjects (a projector that now reads another kind of event
// would skip that kind's events for good), or one that starts after the
// checkpoint, is re-created.
func (r *Runner) consumer(ctx context.Context, stream jetstream.Stream, pos uint64) (jetstream.Consumer, error) {
	name := consumerName(r.p.Name())
	c, err := request(ctx, func(ctx context.Context) (jetstream.Consumer, error) { return stream.Consumer(ctx, name) })
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
	case err != nil:
		return nil, fmt.Errorf("projector %s: consumer: %w", r.p.Name(), err)
	case c.CachedInfo().Config.AckWait != r.cfg.AckWait || !sameSubjects(c.CachedInfo().Config, r.p.Subjects()):
		if err := r.deleteConsumer(ctx, stream, name); err != nil {
			return nil, err
		}
	case c.CachedInfo().Delivered.Stream <= pos && c.CachedInfo().NumAckPending == 0:
		return c, nil
	default:
		c, err := r.moveBack(ctx, stream, name, pos)
		if err != nil || c != nil {
			return c, err
		}
		// It starts after the checkpoint: only a new one delivers what
		// lies between.
		if err := r.deleteConsumer(ctx, stream, name); err != nil {
			return nil, err
		}
	}
	cfg := jetstream.ConsumerConfig{
		Durable:        name,
		Description:    "read model projector " + r.p.Name(),
		FilterSubjects: r.p.Subjects(),
		AckPolicy:      jetstream.AckAllPolicy,
		AckWait:        r.cfg.AckWait,
		MaxAckPending:  4 * r.cfg.Batch,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	}
	if pos > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = pos + 1
	}
	c, err = request(ctx, func(ctx context.Context) (jetstream.Consumer, error) { return stream.CreateOrUpdateConsumer(ctx, cfg) })
	if err != nil {
		return nil, fmt.Errorf("projector %s: create consumer: %w", r.p.Name(), err)
	}
	return c, nil
}

// sameSubjects reports whether cfg filters exactly the subjects want, in
// any order.
func sameSubjects(cfg jetstream.ConsumerConfig, want []string) bool {
	set := func(subjects []string) map[string]bool {
		m := map[string]bool{}
		for _, s := range subjects {
			if s != "" {
				m[s] = true
			}
		}
		return m
	}
	return maps.Equal(set(append([]string{cfg.FilterSubject}, cfg.FilterSubjects...)), set(want))
}

// moveBack resets the consumer to deliver from the checkpoint on, or
// returns nil if it starts after the checkpoint. A reset keeps the
// consumer, and in a cluster that matters: a new one is a new replica
// group, which must elect its leader, and a service restarted after losing
// a node would wait for that election on top of the others.
func (r *Runner) moveBack(ctx context.Context, stream jetstream.Stream, name string, pos uint64) (jetstream.Consumer, error) {
	_, err := request(ctx, func(ctx context.Context) (*jetstream.ConsumerResetResponse, error) {
		return stream.ResetConsumerToSequence(ctx, name, pos+1)
	})
	if errors.Is(err, jetstream.ErrConsumerInvalidReset) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("projector %s: reset consumer: %w", r.p.Name(), err)
	}
	// Again, for its delivery count, which the reset started over.
	c, err := request(ctx, func(ctx context.Context) (jetstream.Consumer, error) { return stream.Consumer(ctx, name) })
	if err != nil {
		return nil, fmt.Errorf("projector %s: consumer: %w", r.p.Name(), err)
	}
	return c, nil
}

func (r *Runner) deleteConsumer(ctx context.Context, stream jetstream.Stream, name string) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	if err := stream.DeleteConsumer(ctx, name); err != nil {
		return fmt.Errorf("projector %s: delete consumer: %w", r.p.Name(), err)
	}
	return nil
}

func (r *Runner) apply(ctx context.Context, batch []jetstream.Msg) error {
	pos := r.Position()
	evs := make([]events.Event, 0, len(batch))
	raw := make(map[uint64]jetstream.Msg, len(batch))
	poison := map[uint64]error{}
	for _, m := range batch {
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("metadata: %w", err)
		}
		seq := meta.Sequence.Stream
		if seq <= pos {
			continue // applied before a restart or a redelivery
		}
		raw[seq] = m
		e, err := natslog.Decode(m.Subject(), m.Headers(), m.Data(), seq)
		if err != nil {
			poison[seq] = err
			continue
		}
		evs = append(evs, e)
	}
	last := batch[len(batch)-1]
	if len(raw) > 0 {
		start := time.Now()
		var span trace.Span
		if r.cfg.Tracer != nil {
			ctx, span = r.startSpan(ctx, batch, len(raw))
		}
		err := r.commit(ctx, pos, evs, raw, poison)
		if span != nil {
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, "apply failed")
			}
			span.End()
		}
		if err != nil {
			return err
		}
		r.cfg.Metrics.Applied(len(raw), time.Since(start))
	}
	// Acknowledging the last acknowledges the batch (AckAll). A lost ack
	// only means a redelivery, which the checkpoint skips.
	if err := last.Ack(); err != nil {
		r.cfg.Logger.Warn("ack", "err", err)
	}
	return nil
}

// startSpan starts the span of a batch. A batch applies the events of many
// requests: it continues the trace of the first, so that one trace shows a
// write from its request to the batch that applied it, and links them all.
func (r *Runner) startSpan(ctx context.Context, batch []jetstream.Msg, size int) (context.Context, trace.Span) {
	var links []trace.Link
	var parent trace.SpanContext
	for _, m := range batch {
		if sc := natslog.TraceContext(m.Headers()); sc.IsValid() {
			if !parent.IsValid() {
				parent = sc
			}
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	if parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	}
	return r.cfg.Tracer.Start(ctx, "project "+r.p.Name(), trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(links...),
		trace.WithAttributes(attribute.String("messaging.system", "nats"), attribute.String("astro.projector", r.p.Name()),
			attribute.Int("messaging.batch.message_count", size)))
}

// commit applies evs in one transaction that moves the checkpoint from
// from to the batch's end. When the batch fails for an event's own fault, it is applied event
// by event so the bad ones can be parked and the rest applied.
func (r *Runner) commit(ctx context.Context, from uint64, evs []events.Event, raw map[uint64]jetstream.Msg, poison map[uint64]error) error {
	if len(poison) > 0 && r.cfg.Parking == nil {
		for seq, err := range poison {
			return fmt.Errorf("seq %d: %w", seq, err)
		}
	}
	end := uint64(0)
	for seq := range raw {
		end = max(end, seq)
	}
	// The checkpoint moves first: see writeCheckpoint.
	begin := func() (*sqlx.Tx, error) {
		tx, err := r.db.BeginTxx(ctx, nil)
		if err != nil {
			return nil, err
		}
		if err := writeCheckpoint(ctx, tx, "projector_checkpoints", r.p.Name(), from, checkpoint{Seq: end, Version: r.version(),
			StreamCreated: r.created, EventID: raw[end].Headers().Get(nats.MsgIdHdr)}); err != nil {
			tx.Rollback()
			return nil, err
		}
		return tx, nil
	}
	tx, err := begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := r.p.Apply(ctx, tx, evs); err != nil {
		if r.cfg.Parking == nil || !poisonous(err) {
			return err
		}
		tx.Rollback()
		if tx, err = begin(); err != nil {
			return err
		}
		defer tx.Rollback()
		bad, err := r.applyIsolated(ctx, tx, evs)
		if err != nil {
			return err
		}
		for seq, err := range bad {
			poison[seq] = err
		}
	}
	// Parked before the commit: a crash in between parks again, which the
	// parked stream de-duplicates, and never loses an event. A park returns
	// once it is as durable as an append, so a power loss cannot keep the
	// checkpoint past an event whose park it lost.
	for seq, perr := range poison {
		m := raw[seq]
		if err := r.cfg.Parking.Park(ctx, r.p.Name(), m.Subject(), m.Headers(), m.Data(), seq, perr.Error()); err != nil {
			return err
		}
		r.cfg.Logger.Error("event parked", "seq", seq, "subject", m.Subject(), "reason", perr)
		// A park waits for the disk, as an append does: many in a row
		// would pass the session's bound on idling in a transaction
		// (pgconn), and PostgreSQL would end the batch, again and again.
		if _, err := tx.ExecContext(ctx, `SELECT 1`); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	r.parked.Add(int64(len(poison)))
	if len(poison) > 0 {
		r.cfg.Metrics.Parked(len(poison))
	}
	r.advance(end)
	return nil
}
