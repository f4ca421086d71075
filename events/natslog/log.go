package natslog

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"astro/events"
	"astro/events/rounds"
)

// Config names the log's streams. Zero values take the defaults.
type Config struct {
	// Stream keeps the history that is kept for good: holidays, resources
	// and workspaces. Default "ASTRO_HISTORY".
	Stream string
	// InboxStream keeps the notification events, whose history is
	// compacted and erased. Default "ASTRO_INBOXES".
	InboxStream    string
	SnapshotBucket string // default "ASTRO_SNAPSHOTS"
	ParkedStream   string // default "ASTRO_PARKED": events projectors could not apply
	// PendingBucket remembers the erasures begun and not yet finished, so
	// a restart finishes them. Default "ASTRO_ERASURES".
	PendingBucket string
	Replicas      int // default 1; 3 on a cluster
	// DuplicateWindow is how long a retried append is recognised by id.
	// Default 20s: Append's own retries end within RetryFor (5 s), and a
	// retry that finds its event in place is recognised without the
	// window too (findOwn); a client's later retry is recognised by its
	// Idempotency-Key's record, and when that record says the request ran
	// before, the command looks for its events in the aggregate's history
	// before appending (commands.Store.ExecuteAgain). The server keeps every id of the window
	// in memory, about 160 bytes each, so the window's length is memory
	// and collector work at full speed: at 6,700 appends a second, a
	// minute held 64 MB, 20 s holds a third of it.
	DuplicateWindow time.Duration
	// AttemptTimeout bounds one publish. A publish that gets no answer (a
	// stream leader being elected) is tried again, under the same id, so
	// it must be well inside RetryFor: one that is not leaves no time for
	// a second publish.
	AttemptTimeout time.Duration // default 1s
	// RetryFor bounds Append's retries of an unreachable log (a reconnect,
	// a leader election), or its ctx when that ends first: past it, Append
	// fails with ErrUnreachable, since a prompt failure serves the caller
	// better than a hang. LastSeq, which is not retried, waits as long for
	// its one answer.
	RetryFor time.Duration // default 5s
	// Bind uses the streams as they are and creates or changes nothing:
	// for tools (audits, tails) that must never reconfigure a running log.
	Bind bool
	// MustExist refuses to create the event stream: Open fails with
	// ErrStreamMissing instead. For a log that is known to have existed.
	MustExist bool
	// EventsOnly, with Bind, binds the event stream alone: what a
	// downstream consumer's credentials reach. Snapshots and parked events
	// are then unavailable.
	EventsOnly bool
	Logger     *slog.Logger
	// Metrics, when set, is told of every append and every retry.
	Metrics Metrics
	// Tracer, when set, traces each append as a producer span and writes
	// the trace context into the events' headers; nil costs nothing.
	Tracer trace.Tracer
	// Sync, when set, is called after each acknowledged append, and the
	// append answers once it returns: it makes the append durable where
	// the server acknowledges before its fsync (the embedded server's
	// grouped fsyncs, natsserver.Server.Sync). Its error fails the append,
	// which may still have happened, as any append that answers an error.
	// A park and a removal (an erasure, a compaction, the snapshots' drop)
	// return after it too, so it must cover every stream and bucket of the
	// log, as the store's syncfs does: what follows them (a projector's
	// checkpoint, an erasure's entry in the ledger closed) must not outlive
	// them in a power loss.
	Sync func(context.Context) error
}

// Metrics is what the log reports of appends.
type Metrics interface {
	// Appended: an Append ended after elapsed with err (nil,
	// events.ErrConflict, events.ErrAlreadyAppended or a failure).
	Appended(elapsed time.Duration, err error)
	// Retried: a publish failed for a passing reason and is tried again.
	Retried()
}

type noMetrics struct{}

func (noMetrics) Appended(time.Duration, error) {}
func (noMetrics) Retried()                      {}

func (c *Config) defaults() {
	if c.Stream == "" {
		c.Stream = "ASTRO_HISTORY"
	}
	if c.InboxStream == "" {
		c.InboxStream = "ASTRO_INBOXES"
	}
	if c.PendingBucket == "" {
		c.PendingBucket = "ASTRO_ERASURES"
	}
	if c.ParkedStream == "" {
		c.ParkedStream = "ASTRO_PARKED"
	}
	if c.SnapshotBucket == "" {
		c.SnapshotBucket = "ASTRO_SNAPSHOTS"
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = 20 * time.Second
	}
	if c.AttemptTimeout == 0 {
		c.AttemptTimeout = time.Second
	}
	if c.RetryFor == 0 {
		c.RetryFor = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = noMetrics{}
	}
}

// Log is the event log. It implements commands.Log.
type Log struct {
	cfg     Config
	nc      *nats.Conn
	js      jetstream.JetStream
	history jetstream.Stream // holidays, resources, workspaces
	inboxes jetstream.Stream // notifications
	parked  jetstream.Stream
	snaps   jetstream.KeyValue
	snapsSt jetstream.Stream // the bucket's stream, for erasing
	pending jetstream.KeyValue
	last    *rounds.Group[uint64] // LastSeq's direct gets, shared by concurrent callers

	syncedHistory, syncedInboxes atomic.Uint64 // see synced
	historyAppends, inboxAppends appends       // see Settled
}

// appends are this instance's appends to one stream: how many are under
// way, and the last position one got.
type appends struct {
	under atomic.Int64
	last  atomic.Uint64
}

func newLog(cfg Config, nc *nats.Conn, js jetstream.JetStream) *Log {
	l := &Log{cfg: cfg, nc: nc, js: js}
	l.last = rounds.New(func(subject string) (uint64, error) {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.RetryFor)
		defer cancel()
		return l.lastSeq(ctx, subject)
	})
	return l
}

// Open creates or updates the streams (idempotently) and returns the log.
func Open(ctx context.Context, nc *nats.Conn, cfg Config) (*Log, error) {
	cfg.defaults()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if cfg.Bind {
		return bind(ctx, nc, js, cfg)
	}
	if cfg.MustExist {
		for _, name := range []string{cfg.Stream, cfg.InboxStream} {
			if _, err := js.Stream(ctx, name); errors.Is(err, jetstream.ErrStreamNotFound) {
				return nil, fmt.Errorf("stream %s: %w", name, ErrStreamMissing)
			} else if err != nil {
				return nil, fmt.Errorf("stream %s: %w", name, err)
			}
		}
	}
	switch _, err := js.Stream(ctx, oldStream); {
	case err == nil:
		return nil, fmt.Errorf("stream %s: %w", oldStream, ErrOldLayout)
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, fmt.Errorf("stream %s: %w", oldStream, err)
	}
	l := newLog(cfg, nc, js)
	if l.history, err = createStream(ctx, js, jetstream.StreamConfig{
		Name:        cfg.Stream,
		Description: "Astro's history kept for good: holiday, resource and workspace events, one subject per aggregate",
		Subjects: []string{
			events.KindSubjects(events.KindHoliday), events.KindSubjects(events.KindResource), events.KindSubjects(events.KindWorkspace),
		},
		// The audit history is never purged. Single events are removed
		// only by a workspace's erasure (Erase), which is why deletes
		// cannot be denied here: a stream that denies them can never
		// allow them again.
		DenyPurge: true,
	}, cfg); err != nil {
		return nil, err
	}
	if l.inboxes, err = createStream(ctx, js, jetstream.StreamConfig{
		Name:        cfg.InboxStream,
		Description: "Astro's notification events, one subject per inbox; compacted, and erased on request",
		Subjects:    []string{events.KindSubjects(events.KindInbox)},
	}, cfg); err != nil {
		return nil, err
	}
	if l.parked, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        cfg.ParkedStream,
		Description: "Events a projector could not apply, with the reason; redriven after a fix",
		Subjects:    []string{parkedPrefix + ">"},
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		Duplicates:  cfg.DuplicateWindow,
	}); err != nil {
		return nil, fmt.Errorf("create stream %s: %w", cfg.ParkedStream, err)
	}
	if l.snaps, err = createBucket(ctx, js, cfg, cfg.SnapshotBucket, "Aggregate snapshots; a cache of the event log, safe to delete"); err != nil {
		return nil, err
	}
	if l.snapsSt, err = js.Stream(ctx, "KV_"+cfg.SnapshotBucket); err != nil {
		return nil, fmt.Errorf("bucket %s: %w", cfg.SnapshotBucket, err)
	}
	if l.pending, err = createBucket(ctx, js, cfg, cfg.PendingBucket, "Erasures begun and not yet finished, finished on restart"); err != nil {
		return nil, err
	}
	return l, nil
}

// createBucket creates or updates a KV bucket of Astro's, one value a key.
func createBucket(ctx context.Context, js jetstream.JetStream, cfg Config, name, description string) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: name, Description: description, History: 1, Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("create bucket %s: %w", name, err)
	}
	return kv, nil
}

// oldStream is where Astro kept every event before the history and the
// inboxes got streams of their own.
const oldStream = "ASTRO_EVENTS"

// ErrOldLayout is a server holding the log as Astro kept it before the
// history and the inboxes got streams of their own.
var ErrOldLayout = errors.New("the log is in the layout of an older Astro (one stream for every event); " +
	"this version keeps holidays and notifications in two streams: start on an empty server, or copy the events over and delete the old stream")

// createStream creates or updates an event stream: the settings every
// event stream shares are set here.
func createStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig, cfg Config) (jetstream.Stream, error) {
	sc.Storage = jetstream.FileStorage
	sc.Replicas = cfg.Replicas
	sc.Retention = jetstream.LimitsPolicy
	sc.Duplicates = cfg.DuplicateWindow
	// Direct gets skip the JetStream API and are several times faster,
	// but on a replicated stream a lagging replica may answer them, and
	// decisions and retry checks must see the latest append. With one
	// replica the only answer is the leader's.
	sc.AllowDirect = cfg.Replicas == 1
	st, err := js.CreateOrUpdateStream(ctx, sc)
	if err != nil {
		return nil, fmt.Errorf("create stream %s: %w", sc.Name, err)
	}
	return st, nil
}

// bind opens the streams as they are.
func bind(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, cfg Config) (*Log, error) {
	l := newLog(cfg, nc, js)
	var err error
	if l.history, err = js.Stream(ctx, cfg.Stream); err != nil {
		return nil, fmt.Errorf("stream %s: %w", cfg.Stream, err)
	}
	if l.inboxes, err = js.Stream(ctx, cfg.InboxStream); err != nil {
		return nil, fmt.Errorf("stream %s: %w", cfg.InboxStream, err)
	}
	if cfg.EventsOnly {
		return l, nil
	}
	if l.parked, err = js.Stream(ctx, cfg.ParkedStream); err != nil {
		return nil, fmt.Errorf("stream %s: %w", cfg.ParkedStream, err)
	}
	if l.snaps, err = js.KeyValue(ctx, cfg.SnapshotBucket); err != nil {
		return nil, fmt.Errorf("bucket %s: %w", cfg.SnapshotBucket, err)
	}
	if l.snapsSt, err = js.Stream(ctx, "KV_"+cfg.SnapshotBucket); err != nil {
		return nil, fmt.Errorf("bucket %s: %w", cfg.SnapshotBucket, err)
	}
	if l.pending, err = js.KeyValue(ctx, cfg.PendingBucket); err != nil {
		return nil, fmt.Errorf("bucket %s: %w", cfg.PendingBucket, err)
	}
	return l, nil
}

// Ping asks the event streams themselves, not just the connection:
// during a leader election on a cluster the connection is up but appends
// fail.
func (l *Log) Ping(ctx context.Context) error {
	for _, st := range []jetstream.Stream{l.history, l.inboxes} {
		name := st.CachedInfo().Config.Name
		if _, err := st.Info(ctx); errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("event stream %s: %w", name, ErrStreamMissing)
		} else if err != nil {
			return fmt.Errorf("event stream %s: %w", name, err)
		}
	}
	return nil
}

// missing reports whether the event stream of subject is known to be
// gone. A failure to find out is not an answer: the append goes on
// retrying.
func (l *Log) missing(ctx context.Context, subject string) bool {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.AttemptTimeout)
	defer cancel()
	_, err := l.streamOf(subject).Info(ctx)
	return errors.Is(err, jetstream.ErrStreamNotFound)
}

// JetStream returns the JetStream context, for consumers of the log.
func (l *Log) JetStream() jetstream.JetStream { return l.js }

// Stream returns the name of the event stream that keeps events of an
// aggregate kind: the inbox stream for inboxes, the history stream for
// every other kind.
func (l *Log) Stream(kind string) string {
	if kind == events.KindInbox {
		return l.cfg.InboxStream
	}
	return l.cfg.Stream
}

// StreamFor returns the name of the event stream that keeps the events of
// subject, whose kind token must be literal: a projector's stream is the
// StreamFor its subjects.
func (l *Log) StreamFor(subject string) string { return l.Stream(subjectKind(subject)) }

// Streams names both event streams, history first.
func (l *Log) Streams() []string { return []string{l.cfg.Stream, l.cfg.InboxStream} }

// streamOf is the stream that keeps subject, whose kind token must be
// literal.
func (l *Log) streamOf(subject string) jetstream.Stream {
	if subjectKind(subject) == events.KindInbox {
		return l.inboxes
	}
	return l.history
}

// subjectKind is the kind token of an event subject or filter: "" when it
// is a wildcard or missing.
func subjectKind(subject string) string {
	rest, ok := strings.CutPrefix(subject, events.SubjectPrefix+".")
	if !ok {
		return ""
	}
	parts := strings.SplitN(rest, ".", 3)
	if len(parts) < 2 || parts[1] == "*" || parts[1] == ">" {
		return ""
	}
	return parts[1]
}

// Durable implements commands.Log: with Config.Sync, one fsync that
// begins now, unless one that began after seq was in the log has ended;
// without, acknowledged is as durable as it gets.
func (l *Log) Durable(ctx context.Context, subject string, seq uint64) error {
	if l.cfg.Sync == nil || seq <= l.synced(subject).Load() {
		return nil
	}
	if err := l.sync(ctx); err != nil {
		return err
	}
	raise(l.synced(subject), seq)
	return nil
}

// sync waits for Config.Sync, when set, which makes every write the server
// acknowledged before the call durable.
func (l *Log) sync(ctx context.Context) error {
	if l.cfg.Sync == nil {
		return nil
	}
	if err := l.cfg.Sync(ctx); err != nil {
		return fmt.Errorf("make durable: %w", err)
	}
	return nil
}

// synced is how far an fsync is known to cover the stream of subject:
// the store writes a stream's messages in order, so one that began after
// a message was acknowledged covers every message before it.
func (l *Log) synced(subject string) *atomic.Uint64 {
	if subjectKind(subject) == events.KindInbox {
		return &l.syncedInboxes
	}
	return &l.syncedHistory
}

// appends are the appends of kind's events (their stream's).
func (l *Log) appends(kind string) *appends {
	if kind == events.KindInbox {
		return &l.inboxAppends
	}
	return &l.historyAppends
}

// Settled returns the last position this instance's appends of kind's
// events got in their stream, and whether none is under way: when none
// is, and nothing else writes, it is the stream's last position, which
// AppendAt can expect.
func (l *Log) Settled(kind string) (last uint64, ok bool) {
	ap := l.appends(kind)
	return ap.last.Load(), ap.under.Load() == 0
}

// raise sets v to seq unless it is already past it.
func raise(v *atomic.Uint64, seq uint64) {
	for {
		cur := v.Load()
		if cur >= seq || v.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// Append implements commands.Log: one event, since every prefix of a
// command's events is a valid history (commands.Decide) and JetStream's
// atomic batches cost hundreds of single appends on a file stream.
func (l *Log) Append(ctx context.Context, subject string, expected uint64, e events.Event) (uint64, error) {
	return l.AppendAt(ctx, subject, expected, 0, e)
}

// AppendAt is Append on one more condition, when at is not 0: that the
// last position of subject's stream is still at. It appends nothing and
// answers events.ErrLogMoved when it is not (or when subject moved past
// expected: the log does not say which), so that a caller that knows the
// stream up to at, as Settled and what its consumers saw tell it, knows
// the stream up to its own event.
func (l *Log) AppendAt(ctx context.Context, subject string, expected, at uint64, e events.Event) (uint64, error) {
	return l.appendTimed(ctx, subject, condition{expected: expected, at: at}, e)
}

// AppendAfter is Append on another condition in place of expected: that
// the last event on the subjects matching guard, a filter that takes in
// subject (a workspace's holidays), is still at guardSeq (0: none). It
// appends nothing and answers events.ErrLogMoved when it is not, so that a
// caller that decided on what those subjects held at guardSeq (a
// workspace's holiday budget) decided on what they hold. On a replicated
// stream the server checks the guard against what it has applied: two
// guarded appends still exclude each other, but one may land behind an
// unguarded append to another of its subjects still in flight (a rename,
// which the budget does not count).
func (l *Log) AppendAfter(ctx context.Context, subject, guard string, guardSeq uint64, e events.Event) (uint64, error) {
	if !subjectMatches(guard, subject) {
		return 0, fmt.Errorf("append to %s after %s: the guard does not take the subject in", subject, guard)
	}
	return l.appendTimed(ctx, subject, condition{expected: guardSeq, guard: guard}, e)
}

// condition is what an append expects of the log: the last event on its
// subject (or on guard's subjects) at expected, and with at the stream's
// last position there too.
type condition struct {
	expected, at uint64
	guard        string
}

func (l *Log) appendTimed(ctx context.Context, subject string, cond condition, e events.Event) (uint64, error) {
	start := time.Now()
	var span trace.Span
	if l.cfg.Tracer != nil {
		ctx, span = l.cfg.Tracer.Start(ctx, "append "+e.Aggregate.Kind, trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(attribute.String("messaging.system", "nats"), attribute.String("messaging.destination.name", subject),
				attribute.String("cloudevents.event_type", e.Type)))
	}
	seq, err := l.append(ctx, subject, cond, e)
	if l.cfg.Sync != nil && (err == nil || errors.Is(err, events.ErrAlreadyAppended)) {
		// A duplicate is synced too: the attempt that stored it may not
		// have been answered yet.
		if serr := l.sync(ctx); serr != nil {
			seq, err = 0, fmt.Errorf("append to %s: %w", subject, serr)
		} else {
			raise(l.synced(subject), seq)
		}
	}
	l.cfg.Metrics.Appended(time.Since(start), err)
	if span != nil {
		span.SetAttributes(attribute.Int64("astro.log.sequence", int64(seq)))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "append failed")
		}
		span.End()
	}
	return seq, err
}

func (l *Log) append(ctx context.Context, subject string, cond condition, e events.Event) (uint64, error) {
	expected, at := cond.expected, cond.at
	if s := events.Subject(e.WorkspaceID, e.Aggregate); s != subject {
		return 0, fmt.Errorf("append: event for %s in an append to %s", s, subject)
	}
	msg := Encode(e)
	if l.cfg.Tracer != nil {
		injectTrace(ctx, msg.Header)
	}
	msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expected, 10))
	if cond.guard != "" {
		msg.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, cond.guard)
	}
	if at != 0 {
		msg.Header.Set(jetstream.ExpectedLastSeqHeader, strconv.FormatUint(at, 10))
	}
	ap := l.appends(e.Aggregate.Kind)
	ap.under.Add(1)
	defer ap.under.Add(-1)

	retryCtx, cancel := context.WithTimeout(ctx, l.cfg.RetryFor)
	defer cancel()
	wait := 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		last, err := l.publish(retryCtx, msg)
		switch {
		case err == nil:
			raise(&ap.last, last)
			return last, nil
		case errors.Is(err, errDuplicate):
			return last, fmt.Errorf("append to %s: %w", subject, events.ErrAlreadyAppended)
		case isWrongLastSeq(err):
			// Our own earlier attempt may be what moved the subject on: a
			// single-replica stream checks the expected sequence before
			// it recognises a retry by its id.
			if seq, ok, ferr := l.findOwn(ctx, subject, cond, e); ferr != nil {
				return 0, ferr
			} else if ok {
				return seq, nil
			}
			if at != 0 || cond.guard != "" {
				return 0, fmt.Errorf("append to %s after %d at %d: %w", subject, expected, at, events.ErrLogMoved)
			}
			return 0, fmt.Errorf("append to %s after %d: %w", subject, expected, events.ErrConflict)
		case !Transient(err):
			return 0, fmt.Errorf("append to %s: %w", subject, err)
		case errors.Is(err, nats.ErrNoResponders) && l.missing(ctx, subject):
			// Nothing stores the subject because the stream is gone:
			// waiting will not bring it back, and recreating it is not
			// ours to do (an empty log would hide the loss).
			l.cfg.Logger.Error("event stream missing: appends fail until it is restored", "subject", subject)
			return 0, fmt.Errorf("append to %s: %w", subject, ErrStreamMissing)
		}
		l.cfg.Logger.Warn("append failed, retrying", "subject", subject, "attempt", attempt, "err", err)
		l.cfg.Metrics.Retried()
		select {
		case <-retryCtx.Done():
			if ctx.Err() != nil {
				return 0, fmt.Errorf("append to %s: %w (last error: %v)", subject, ctx.Err(), err)
			}
			l.cfg.Logger.Error("event log unreachable: append given up", "subject", subject, "after", l.cfg.RetryFor, "err", err)
			return 0, fmt.Errorf("append to %s: %w for %v (last error: %v)", subject, ErrUnreachable, l.cfg.RetryFor, err)
		case <-time.After(wait):
		}
		wait = min(wait*2, time.Second)
	}
}

// bounded runs get, a read of the log, each attempt bounded by attempt
// and tried again while the log passes through a fault, within retryFor.
// A request sent as the connection goes stale gets no answer, and bounded
// by its caller's deadline alone it held a command for its whole 30 s
// though the log answered again seconds later.
func bounded[T any](ctx context.Context, attempt, retryFor time.Duration, get func(context.Context) (T, error)) (T, error) {
	retryCtx, cancel := context.WithTimeout(ctx, retryFor)
	defer cancel()
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		attemptCtx, cancelAttempt := context.WithTimeout(retryCtx, attempt)
		v, err := get(attemptCtx)
		cancelAttempt()
		if err == nil || !Transient(err) || ctx.Err() != nil {
			return v, err
		}
		select {
		case <-retryCtx.Done():
			return v, err
		case <-time.After(wait):
		}
	}
}

// getMsg is the message at seq on subject (the first after it, with a
// subject), read as bounded does.
func (l *Log) getMsg(ctx context.Context, subject string, seq uint64) (*jetstream.RawStreamMsg, error) {
	return bounded(ctx, l.cfg.AttemptTimeout, l.cfg.RetryFor, func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
		m, err := l.streamOf(subject).GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, nats.ErrNoResponders) && l.missing(ctx, subject) {
			// Gone, as an append finds it: waiting will not bring it back.
			return nil, fmt.Errorf("read %s: %w", subject, ErrStreamMissing)
		}
		return m, err
	})
}

// pubAck is the server's answer to a JetStream publish.
type pubAck struct {
	Stream    string              `json:"stream"`
	Seq       uint64              `json:"seq"`
	Duplicate bool                `json:"duplicate"`
	Error     *jetstream.APIError `json:"error"`
}

// publish sends msg and returns its sequence.
func (l *Log) publish(ctx context.Context, msg *nats.Msg) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.AttemptTimeout)
	defer cancel()
	resp, err := l.nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		return 0, err
	}
	var ack pubAck
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return 0, fmt.Errorf("decode publish ack: %w", err)
	}
	if ack.Error != nil {
		return 0, ack.Error
	}
	if ack.Seq == 0 {
		return 0, errors.New("publish ack without a sequence")
	}
	if ack.Duplicate {
		return ack.Seq, errDuplicate
	}
	return ack.Seq, nil
}

// findOwn reports whether the first event after expected on subject is e,
// that is, whether an earlier attempt of this append went in.
func (l *Log) findOwn(ctx context.Context, subject string, cond condition, e events.Event) (uint64, bool, error) {
	m, err := l.getMsg(ctx, subject, cond.expected+1)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("check own append on %s: %w", subject, err)
	}
	if m.Header.Get(nats.MsgIdHdr) != e.ID {
		return 0, false, nil
	}
	return m.Sequence, true, nil
}

// LastSeq returns the sequence of the last event on subject, which may
// hold wildcards (every holiday of a workspace), or 0 when there is none,
// as of some moment after the call: the question a read asks before it
// trusts a read model. It is one direct get on a single-replica stream,
// and callers asking about the same subject at the same time share one
// (package rounds): under load, the renames of a workspace all ask for
// the last position of its resources.
func (l *Log) LastSeq(ctx context.Context, subject string) (uint64, error) {
	// A caller that joins the round after the one under way waits for both:
	// bounded, like a direct get of its own, by RetryFor, as long as an
	// append waits through a leader election: the get is not retried.
	ctx, cancel := context.WithTimeout(ctx, l.cfg.RetryFor)
	defer cancel()
	return l.last.Do(ctx, subject)
}

func (l *Log) lastSeq(ctx context.Context, subject string) (uint64, error) {
	m, err := l.streamOf(subject).GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("last sequence of %s: %w", subject, err)
	}
	return m.Sequence, nil
}

// Position returns the highest sequence either event stream has reached:
// no write can have answered a position beyond it.
func (l *Log) Position(ctx context.Context) (uint64, error) {
	var last uint64
	for _, st := range []jetstream.Stream{l.history, l.inboxes} {
		info, err := st.Info(ctx)
		if err != nil {
			return 0, fmt.Errorf("event stream %s: %w", st.CachedInfo().Config.Name, err)
		}
		last = max(last, info.State.LastSeq)
	}
	return last, nil
}

// End returns the sequence of the last event of the stream that keeps
// events of kind.
func (l *Log) End(ctx context.Context, kind string) (uint64, error) {
	st := l.history
	if kind == events.KindInbox {
		st = l.inboxes
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("event stream %s: %w", l.Stream(kind), err)
	}
	return info.State.LastSeq, nil
}

// After reports whether the stream of kind's events holds an event after
// position seq, as of some moment after the call: the question a read
// that knows the stream up to seq asks instead of where an aggregate's last
// event is. It is one get of the next message after seq, whose "not
// found" carries no event's headers to build and decode.
func (l *Log) After(ctx context.Context, kind string, seq uint64) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.AttemptTimeout)
	defer cancel()
	subjects := events.KindSubjects(kind)
	if st := l.streamOf(subjects); !st.CachedInfo().Config.AllowDirect {
		// No direct gets on a replicated stream: the stream's own get, as
		// a scan asks it.
		more, err := remains(ctx, st, []string{subjects}, seq)
		if err != nil {
			return false, fmt.Errorf("events after %d: %w", seq, err)
		}
		return more, nil
	}
	// The direct get by hand: the client library's costs more than the
	// get itself (a read's whole budget is a fraction of a millisecond).
	req := `{"seq":` + strconv.FormatUint(seq+1, 10) + `,"next_by_subj":"` + subjects + `"}`
	m, err := l.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+l.Stream(kind), []byte(req))
	if err != nil {
		return false, fmt.Errorf("events after %d: %w", seq, err)
	}
	switch status := m.Header.Get("Status"); status {
	case "":
		return true, nil // a message
	case "404":
		return false, nil
	default:
		return false, fmt.Errorf("events after %d: direct get answered %s %s", seq, status, m.Header.Get("Description"))
	}
}

// FirstSeq returns the sequence of the oldest event the log still holds
// on subject (0 when it holds none). Compaction and erasure remove an
// inbox's early events: a reader that last saw an event of subject before
// it cannot be told what it missed.
func (l *Log) FirstSeq(ctx context.Context, subject string) (uint64, error) {
	seq, _, err := l.First(ctx, subject)
	return seq, err
}

// First returns the sequence and the event type (its ce-type header, ""
// for a message that is no event) of the oldest message the log holds on
// subject, 0 when it holds none. It decodes nothing, so that an erasure
// deciding what to take is not stopped by a malformed message: it takes
// that too.
func (l *Log) First(ctx context.Context, subject string) (seq uint64, eventType string, err error) {
	m, err := l.getMsg(ctx, subject, 1)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("first message of %s: %w", subject, err)
	}
	return m.Sequence, m.Header.Get(hType), nil
}

// Read implements commands.Log. It asks for one event at a time (a
// direct get each, the cheapest for the few events after a snapshot,
// each bounded as getMsg says); a long history is read on through an
// ordered consumer instead, which the caller's deadline alone bounds.
func (l *Log) Read(ctx context.Context, subject string, after uint64, fn func(events.Event) error) (uint64, error) {
	const direct = 32
	for i := 0; ; i++ {
		if i == direct {
			err := scan(ctx, l.streamOf(subject), []string{subject}, events.ScanFrom{Seq: after + 1}, false, func(e events.Event) error {
				if err := fn(e); err != nil {
					return err
				}
				after = e.Seq
				return nil
			})
			return after, err
		}
		m, err := l.getMsg(ctx, subject, after+1)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return after, nil
		}
		if err != nil {
			return after, fmt.Errorf("read %s from %d: %w", subject, after+1, err)
		}
		e, err := Decode(m.Subject, m.Header, m.Data, m.Sequence)
		if err != nil {
			return after, err
		}
		if err := fn(e); err != nil {
			return after, err
		}
		after = m.Sequence
	}
}

func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Transient reports an error of a log passing through a fault: no quorum
// or a leader election (a 503), a timeout, a reconnect. The request's
// outcome is unknown and trying it again may succeed: Append tries again
// with the same message ids, and a service starting waits.
func Transient(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		// 503: no quorum or a leader election.
		return apiErr.Code == 503
	}
	return errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrConnectionReconnecting)
}

// Snapshots returns the snapshot store, which implements commands.Snapshots.
func (l *Log) Snapshots() Snapshots {
	return Snapshots{kv: l.snaps, stream: l.snapsSt, sync: l.sync, attempt: l.cfg.AttemptTimeout}
}

// Snapshots keeps aggregate state in a KV bucket: 8 bytes of sequence, then
// the state.
type Snapshots struct {
	kv      jetstream.KeyValue
	stream  jetstream.Stream
	sync    func(context.Context) error // the log's, for Erase
	attempt time.Duration               // the log's AttemptTimeout, for Load
}

// Load implements commands.Snapshots. A snapshot is an optimisation: its
// read gets one attempt, and a command that does not get it reads the log
// instead. Bounded by the caller's deadline alone, one lost in a reconnect
// took the time of that log read too.
func (s Snapshots) Load(ctx context.Context, key string) (uint64, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.attempt)
	defer cancel()
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil, nil
	}
	if err != nil {
		return 0, nil, err
	}
	v := e.Value()
	if len(v) < 8 {
		return 0, nil, fmt.Errorf("snapshot %s: too short", key)
	}
	return binary.BigEndian.Uint64(v), v[8:], nil
}

// Save implements commands.Snapshots.
func (s Snapshots) Save(ctx context.Context, key string, seq uint64, data []byte) error {
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(data)), seq)
	_, err := s.kv.Put(ctx, key, append(v, data...))
	return err
}

// ErrUnreachable is an append that found no working log for
// Config.RetryFor. It may still have happened.
var ErrUnreachable = errors.New("event log unreachable")

// ErrStreamMissing is the event stream gone from the server (deleted, or a
// server that never had it). Astro never recreates it on its own.
var ErrStreamMissing = errors.New("event stream missing")

// errDuplicate: the server dropped the message as a duplicate of one in
// its window.
var errDuplicate = errors.New("duplicate message id")
