package projections

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"astro/events"
	"astro/events/natslog"
)

// Model is a projector whose read model can be rebuilt beside the live one.
type Model interface {
	Projector
	// Version names what Apply makes of the log. Change it with any change
	// to Apply that makes a different read model of the same log: the
	// runner then rebuilds the read model beside the live one at start.
	Version() int
	// Tables are the tables the projector writes, all of them, in the
	// order its batches first write them (a switch locks them in this
	// order, so it cannot deadlock with a batch).
	Tables() []string
}

// RebuildConfig tunes Rebuild.
type RebuildConfig struct {
	Stream string // the event stream's name
	Batch  int    // most events per transaction; default 20000
	// Force switches over even when the rebuilt read model differs from
	// the live one (the differences are in the result).
	Force bool
	// Wait waits for another rebuild of the same read model to end instead
	// of failing with ErrRebuildRunning.
	Wait bool
	// MaxDiffs is how many differing rows a table reports; default 10.
	MaxDiffs int
	// Progress, when set, is told how the rebuild goes, about every
	// ProgressEvery (default 1s) and at each phase's end.
	Progress      func(Progress)
	ProgressEvery time.Duration
	Logger        *slog.Logger

	// migrations are the ones the new read model is made by, all
	// under migrations/: the embedded ones but in a test.
	migrations fs.FS

	// diverged: the live read model is known wrong (the log does not hold
	// its history), and nothing may apply to it meanwhile (the caller holds
	// the projector's lock). The rebuild goes to the log's end and replaces
	// it whatever the comparison says.
	diverged bool
}

// Progress is a rebuild's state.
type Progress struct {
	Phase     string  // "building", "indexing", "comparing", "switched", "disagree"
	Applied   int64   // events applied by this run
	Position  uint64  // log sequence the new read model reached
	Remaining uint64  // events of the projector's subjects still to apply, as of the last one read
	Rate      float64 // events applied per second, this run
	ETA       time.Duration
}

// Diff is what one table holds on one side only.
type Diff struct {
	Table  string   `json:"table"`
	Side   string   `json:"side"` // "live" or "rebuilt"
	Rows   int64    `json:"rows"`
	Sample []string `json:"sample"` // up to MaxDiffs rows, as PostgreSQL prints a row
}

// RebuildResult says what a rebuild did.
type RebuildResult struct {
	Name        string        `json:"name"`
	Version     int           `json:"version"`
	ResumedFrom uint64        `json:"resumedFrom"` // the checkpoint an earlier, interrupted run left; 0 when it started afresh
	Position    uint64        `json:"position"`    // the log position both read models were compared at
	Applied     int64         `json:"applied"`     // events applied by this run
	Elapsed     time.Duration `json:"elapsed"`
	Switched    bool          `json:"switched"`
	Diffs       []Diff        `json:"diffs,omitempty"`
}

var (
	// ErrRebuildRunning: another rebuild of the read model holds its lease.
	ErrRebuildRunning = errors.New("another rebuild of this read model is running")
	// ErrDisagree: the rebuilt read model differs from the live one, and
	// the switch was not forced. The rebuilt one is kept: a later run with
	// Force switches to it without building again.
	ErrDisagree = errors.New("the rebuilt read model differs from the live one; not switched")
)

// BuildSchema is the PostgreSQL schema a rebuild of the named read model
// builds in, beside the live one.
func BuildSchema(name string) string { return "rebuild_" + name }

// Rebuild builds a new version of m's read model from the log, in its own
// schema, while the live one keeps serving and following the log; then,
// with the live one's writes held for a moment, brings the new one to the
// live one's position, compares the two table by table, and switches them
// in one transaction if they agree (or cfg.Force). Queries name tables
// without a schema, so the switch is invisible to them: PostgreSQL plans
// their prepared statements again against the tables now bearing the names.
//
// A lease (an advisory lock) lets one rebuild of a read model run at a time
// across instances. The new version's checkpoint is committed with each
// batch, so a run that crashed resumes where it stopped.
func Rebuild(ctx context.Context, js jetstream.JetStream, db *sqlx.DB, m Model, cfg RebuildConfig) (RebuildResult, error) {
	if js == nil || db == nil || m == nil || cfg.Stream == "" {
		return RebuildResult{}, errors.New("projections: Rebuild needs JetStream, a database, a projector and a stream name")
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 20000
	}
	if cfg.MaxDiffs <= 0 {
		cfg.MaxDiffs = 10
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.migrations == nil {
		cfg.migrations = migrations
	}
	rb := &rebuild{js: js, db: db, m: m, cfg: cfg, log: cfg.Logger.With("rebuild", m.Name()),
		build: pq.QuoteIdentifier(BuildSchema(m.Name())), retired: pq.QuoteIdentifier("retired_" + m.Name()),
		res: RebuildResult{Name: m.Name(), Version: m.Version()}, start: time.Now()}
	rb.reported = rb.start
	lease, err := rb.lease(ctx)
	if err != nil {
		return rb.res, err
	}
	defer release(lease)
	if err := rb.run(ctx); err != nil {
		return rb.res, fmt.Errorf("rebuild %s: %w", m.Name(), err)
	}
	return rb.res, nil
}

type rebuild struct {
	js             jetstream.JetStream
	db             *sqlx.DB
	m              Model
	cfg            RebuildConfig
	log            *slog.Logger
	build, retired string // quoted schema names
	live           string // quoted schema of the live read model
	stream         jetstream.Stream
	created        string // the stream's identity
	res            RebuildResult
	start          time.Time
	reported       time.Time

	pos     uint64 // the new read model's checkpoint
	eventID string // the event at pos
	cons    jetstream.Consumer
	msgs    chan *logged
	errs    chan error
	back    []*logged // read, not applied: read again first
	remain  uint64    // events still to read, as of the last one read
	read    uint64    // the log sequence of the last event read
	closeFn func()
}

// lease takes the rebuild's advisory lock on a connection of its own, held
// until the connection closes.
func (rb *rebuild) lease(ctx context.Context) (*sqlx.Conn, error) {
	conn, err := rb.db.Connx(ctx)
	if err != nil {
		return nil, err
	}
	for {
		var got bool
		if err := conn.GetContext(ctx, &got, `SELECT pg_try_advisory_lock(hashtext($1))`, "astro.rebuild."+rb.m.Name()); err != nil {
			conn.Close()
			return nil, fmt.Errorf("rebuild %s: lease: %w", rb.m.Name(), err)
		}
		if got {
			return conn, nil
		}
		if !rb.cfg.Wait {
			conn.Close()
			return nil, fmt.Errorf("rebuild %s: %w", rb.m.Name(), ErrRebuildRunning)
		}
		select {
		case <-ctx.Done():
			conn.Close()
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (rb *rebuild) run(ctx context.Context) error {
	var live string
	if err := rb.db.GetContext(ctx, &live, `SELECT current_schema()`); err != nil {
		return err
	}
	rb.live = pq.QuoteIdentifier(live)
	// The live projector goes on meanwhile: its checkpoint is read before
	// the log's end, or a batch applied in between would look like a read
	// model ahead of its log.
	var lc checkpoint
	if !rb.cfg.diverged {
		var err error
		if lc, err = readCheckpoint(ctx, rb.db, rb.live+".projector_checkpoints", rb.m.Name()); err != nil {
			return err
		}
	}
	var err error
	if rb.stream, err = rb.js.Stream(ctx, rb.cfg.Stream); err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	info, err := rb.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	rb.created = streamCreated(info)
	if !rb.cfg.diverged {
		why, err := diverged(ctx, rb.stream, info, lc)
		if err != nil {
			return err
		}
		if why != "" {
			return fmt.Errorf("the live read model does not follow this log (%s): a running Astro rebuilds it by itself", why)
		}
	}
	if err := rb.prepare(ctx, info); err != nil {
		return err
	}
	if err := rb.open(ctx); err != nil {
		return err
	}
	defer rb.close()
	for indexed := false; ; {
		if err := rb.catchUp(ctx); err != nil {
			return err
		}
		if !indexed {
			if err := rb.index(ctx); err != nil {
				return err
			}
			indexed = true
			continue // the live model went on meanwhile
		}
		done, err := rb.switchOver(ctx)
		if done || err != nil {
			return err
		}
	}
}

// prepare resumes the new read model an earlier run left, when it was
// built by this version from this log with these migrations; otherwise it
// creates it afresh, by the same migrations as the live one, so that both
// have the same tables, columns and index names.
func (rb *rebuild) prepare(ctx context.Context, info *jetstream.StreamInfo) error {
	if _, err := rb.db.ExecContext(ctx, `DROP SCHEMA IF EXISTS `+rb.retired+` CASCADE`); err != nil {
		return err
	}
	files, err := fs.Glob(rb.cfg.migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(files)
	bodies := make([][]byte, len(files))
	sum := sha256.New()
	for i, f := range files {
		if bodies[i], err = fs.ReadFile(rb.cfg.migrations, f); err != nil {
			return err
		}
		fmt.Fprintf(sum, "%s\x00%d\x00%s", f, len(bodies[i]), bodies[i])
	}
	digest, last := hex.EncodeToString(sum.Sum(nil)), ""
	if len(files) > 0 {
		last = path.Base(files[len(files)-1])
	}
	var exists bool
	if err := rb.db.GetContext(ctx, &exists, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, BuildSchema(rb.m.Name())); err != nil {
		return err
	}
	if exists {
		c, err := readCheckpoint(ctx, rb.db, rb.build+".projector_checkpoints", rb.m.Name())
		if err == nil && c.exists && c.Version == rb.m.Version() && c.StreamCreated == rb.created {
			why, err := diverged(ctx, rb.stream, info, c)
			if err != nil {
				return err
			}
			if why == "" {
				if why, err = rb.migratedOtherwise(ctx, last, digest); err != nil {
					return err
				}
			}
			if why == "" {
				rb.pos, rb.eventID, rb.res.ResumedFrom = c.Seq, c.EventID, c.Seq
				rb.log.Info("resuming an interrupted rebuild", "from", c.Seq+1)
				return nil
			}
			rb.log.Warn("discarding an interrupted rebuild", "reason", why)
		}
		if _, err := rb.db.ExecContext(ctx, `DROP SCHEMA `+rb.build+` CASCADE`); err != nil {
			return err
		}
	}
	tx, err := rb.db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE SCHEMA `+rb.build+`; SET LOCAL search_path TO `+rb.build); err != nil {
		return err
	}
	for i, f := range files {
		if _, err := tx.ExecContext(ctx, string(bodies[i])); err != nil {
			return fmt.Errorf("create the new read model: %s: %w", f, err)
		}
	}
	if err := writeCheckpoint(ctx, tx, rb.build+".projector_checkpoints", rb.m.Name(), 0,
		checkpoint{Version: rb.m.Version(), StreamCreated: rb.created}); err != nil {
		return err
	}
	// A later release may add a migration without a new projector
	// version: Migrate applies it to the live tables only, and a resumed
	// run would switch in tables made without it.
	if _, err := tx.ExecContext(ctx, `CREATE TABLE rebuild_migrations (last text NOT NULL, digest text NOT NULL)`); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO rebuild_migrations VALUES ($1, $2)`, last, digest); err != nil {
		return err
	}
	// Loading into tables without their secondary indexes, then indexing
	// once, is faster than keeping the indexes up to date row by row. What
	// to index again is kept in the schema, so a resumed run does it too.
	if _, err := tx.ExecContext(ctx, `CREATE TABLE rebuild_indexes (name text PRIMARY KEY, def text NOT NULL)`); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO rebuild_indexes SELECT i.indexname, i.indexdef FROM pg_indexes i
		WHERE i.schemaname = $1 AND i.tablename = ANY($2)
		  AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = (quote_ident(i.schemaname) || '.' || quote_ident(i.indexname))::regclass)`,
		BuildSchema(rb.m.Name()), pq.Array(rb.m.Tables())); err != nil {
		return fmt.Errorf("create the new read model: %w", err)
	}
	var names []string
	if err := tx.SelectContext(ctx, &names, `SELECT name FROM rebuild_indexes`); err != nil {
		return err
	}
	for _, n := range names {
		if _, err := tx.ExecContext(ctx, `DROP INDEX `+rb.build+`.`+pq.QuoteIdentifier(n)); err != nil {
			return fmt.Errorf("create the new read model: %w", err)
		}
	}
	return tx.Commit()
}

// migratedOtherwise says why the new read model an earlier run left was
// not made by this release's migrations (the last of them named last, all
// of them summed up in digest), or "" when it was.
func (rb *rebuild) migratedOtherwise(ctx context.Context, last, digest string) (string, error) {
	var recorded bool
	if err := rb.db.GetContext(ctx, &recorded, `SELECT to_regclass($1) IS NOT NULL`, rb.build+".rebuild_migrations"); err != nil {
		return "", err
	}
	if !recorded {
		return "an earlier release built it, which did not record its migrations", nil
	}
	var built struct{ Last, Digest string }
	if err := rb.db.GetContext(ctx, &built, `SELECT last, digest FROM `+rb.build+`.rebuild_migrations`); err != nil {
		return "", fmt.Errorf("read the new read model's migrations: %w", err)
	}
	if built.Digest != digest {
		return fmt.Sprintf("it was made by other migrations than this release's (the last it ran is %s, this release's is %s)", built.Last, last), nil
	}
	return "", nil
}

// index creates the secondary indexes prepare left out, once the new read
// model holds what the log did when the run started.
func (rb *rebuild) index(ctx context.Context) error {
	var defs []string
	if err := rb.db.SelectContext(ctx, &defs, `SELECT def FROM `+rb.build+`.rebuild_indexes`); err != nil {
		return fmt.Errorf("index the new read model: %w", err)
	}
	if len(defs) == 0 {
		return nil
	}
	rb.report("indexing", true)
	tx, err := rb.db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, d := range defs {
		if _, err := tx.ExecContext(ctx, d); err != nil {
			return fmt.Errorf("index the new read model: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM `+rb.build+`.rebuild_indexes`); err != nil {
		return err
	}
	return tx.Commit()
}

// open starts reading the projector's subjects after the new read model's
// checkpoint, through a consumer of its own that goes away with the run.
func (rb *rebuild) open(ctx context.Context) error {
	cons, err := rb.stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		Description:       "rebuild of read model " + rb.m.Name(),
		FilterSubjects:    rb.m.Subjects(),
		AckPolicy:         jetstream.AckNonePolicy,
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       rb.pos + 1,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	rb.cons = cons
	// What the new read model holds counts as read: a resumed run that
	// reads nothing has still reached its checkpoint.
	rb.read, rb.remain = rb.pos, cons.CachedInfo().NumPending
	it, err := cons.Messages(jetstream.PullMaxMessages(2 * rb.cfg.Batch))
	if err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	rb.msgs, rb.errs = make(chan *logged, rb.cfg.Batch), make(chan error, 1)
	// Decoding here overlaps with the database applying the previous batch.
	go func() {
		defer close(rb.msgs)
		for {
			m, err := it.Next()
			if err == nil {
				var l *logged
				if l, err = read(m); err == nil {
					rb.msgs <- l
					continue
				}
			}
			if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				rb.errs <- err
			}
			return
		}
	}()
	rb.closeFn = func() {
		it.Stop()
		for range rb.msgs { // unblock the reader so it sees the stop
		}
	}
	return nil
}

// logged is an event as read from the log.
type logged struct {
	seq, pending uint64 // stream sequence; the consumer's events left after it
	id           string // Nats-Msg-Id
	e            events.Event
	err          error // not an event this build can read
}

func read(m jetstream.Msg) (*logged, error) {
	meta, err := m.Metadata()
	if err != nil {
		return nil, fmt.Errorf("read the log: %w", err)
	}
	l := &logged{seq: meta.Sequence.Stream, pending: meta.NumPending, id: m.Headers().Get(nats.MsgIdHdr)}
	l.e, l.err = natslog.Decode(m.Subject(), m.Headers(), m.Data(), l.seq)
	return l, nil
}

func (rb *rebuild) close() {
	rb.closeFn()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rb.stream.DeleteConsumer(ctx, rb.cons.CachedInfo().Name); err != nil {
		rb.log.Debug("delete the rebuild's consumer", "err", err) // it goes by itself when inactive
	}
}

// next returns the next event of the projector's subjects, or nil when
// none came within wait.
func (rb *rebuild) next(ctx context.Context, wait time.Duration) (*logged, error) {
	if len(rb.back) > 0 {
		m := rb.back[0]
		rb.back = rb.back[1:]
		return m, nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case m, ok := <-rb.msgs:
		if !ok {
			select {
			case err := <-rb.errs:
				return nil, fmt.Errorf("read the log: %w", err)
			default:
				return nil, errors.New("read the log: the reader stopped")
			}
		}
		return m, nil
	case <-t.C:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// unread puts events back, to be read again first.
func (rb *rebuild) unread(ls ...*logged) {
	rb.back = append(append([]*logged(nil), ls...), rb.back...)
}

// take reads events up to log sequence limit, at most n of them, and
// stops when none are left to read. An event's count of those left after
// it is as of its delivery: at the end of what it counted, take asks the
// log once whether more came since, as events written while the rebuild
// indexes or waits for the live tables do.
func (rb *rebuild) take(ctx context.Context, limit uint64, n int, into []*logged) ([]*logged, error) {
	for asked := false; len(into) < n; {
		if rb.remain == 0 && len(rb.back) == 0 {
			if asked || rb.read >= limit {
				break
			}
			info, err := rb.cons.Info(ctx)
			if err != nil {
				return into, fmt.Errorf("read the log: %w", err)
			}
			asked, rb.remain = true, info.NumPending
			if info.Delivered.Stream > rb.read {
				rb.remain++ // sent to this reader, not read yet
			}
			if rb.remain == 0 {
				break
			}
		}
		m, err := rb.next(ctx, 5*time.Second)
		if err != nil {
			return into, err
		}
		if m == nil {
			// Nothing came though more was due (deleted meanwhile?): ask.
			info, err := rb.cons.Info(ctx)
			if err != nil {
				return into, fmt.Errorf("read the log: %w", err)
			}
			asked, rb.remain = true, info.NumPending
			continue
		}
		rb.read = max(rb.read, m.seq)
		if m.seq > limit {
			rb.unread(m)
			break
		}
		rb.remain = m.pending
		into = append(into, m)
	}
	return into, nil
}

// upTo reads every event left up to log sequence limit, for the switch.
// take asks the log once whether more came: events the live projector
// applied one at a time after the last catch-up were each delivered with
// none counted after them, so it is called until it finds nothing more.
// The new read model must reach limit, or the switch would set the live
// checkpoint past events it never applied: short of it, upTo fails unless
// the log holds nothing more to read (the events between were erased).
func (rb *rebuild) upTo(ctx context.Context, limit uint64) ([]*logged, error) {
	var batch []*logged
	for {
		n := len(batch)
		var err error
		if batch, err = rb.take(ctx, limit, math.MaxInt, batch); err != nil {
			return batch, err
		}
		if len(batch) == n {
			break
		}
	}
	if rb.read >= limit {
		return batch, nil
	}
	info, err := rb.cons.Info(ctx)
	if err != nil {
		return batch, fmt.Errorf("read the log: %w", err)
	}
	if info.NumPending > 0 || info.Delivered.Stream > rb.read {
		return batch, fmt.Errorf("read the log: the new read model reached %d, not the live one's %d", rb.read, limit)
	}
	return batch, nil
}

// catchUp applies the log up to the live read model's position (to the
// log's end when that one is wrong), one transaction a batch, each with the
// new read model's checkpoint.
func (rb *rebuild) catchUp(ctx context.Context) error {
	limit := uint64(math.MaxUint64)
	if !rb.cfg.diverged {
		c, err := readCheckpoint(ctx, rb.db, rb.live+".projector_checkpoints", rb.m.Name())
		if err != nil {
			return err
		}
		limit = c.Seq
	}
	batch := make([]*logged, 0, rb.cfg.Batch)
	for applied := false; ; applied = true {
		var err error
		if batch, err = rb.take(ctx, limit, rb.cfg.Batch, batch[:0]); err != nil {
			return err
		}
		if len(batch) == 0 {
			if applied {
				rb.report("building", true)
			}
			return nil
		}
		if err := rb.applyBatch(ctx, batch); err != nil {
			return err
		}
		rb.report("building", false)
	}
}

// applyBatch applies batch in a transaction of its own, whose unqualified
// names are the new read model's tables, and moves to where it reached
// once it is committed. A commit need not wait for the disk: a crash loses
// the last batches with their checkpoint, and the next run applies them
// again.
func (rb *rebuild) applyBatch(ctx context.Context, batch []*logged) error {
	tx, err := rb.db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SET LOCAL search_path TO `+rb.build+`; SET LOCAL synchronous_commit TO off`); err != nil {
		return err
	}
	to, err := rb.apply(ctx, tx, batch)
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	rb.moveTo(to)
	return nil
}

// advance is where a batch brings the new read model: its checkpoint, and
// the events it applied. Its transaction holds it until it commits: the
// rebuild moves to it (moveTo) only then, so that a batch rolled back, to
// be read and applied again, leaves nothing to undo.
type advance struct {
	pos     uint64 // the checkpoint
	eventID string // the event at pos
	applied int64  // events applied
}

// moveTo takes up a batch's advance once its transaction is committed.
func (rb *rebuild) moveTo(a advance) {
	rb.pos, rb.eventID = a.pos, a.eventID
	rb.res.Applied += a.applied
}

// apply applies batch to the new read model, inside tx, with its
// checkpoint, and returns where the batch brings it once tx commits.
// Events the live projector parks (it cannot read or apply them) are left
// out here too.
func (rb *rebuild) apply(ctx context.Context, tx *sqlx.Tx, batch []*logged) (advance, error) {
	evs := make([]events.Event, 0, len(batch))
	pos, id, bad := rb.pos, rb.eventID, 0
	for _, l := range batch {
		if l.seq <= pos {
			continue
		}
		pos, id = l.seq, l.id
		if l.err != nil {
			bad++
			continue
		}
		evs = append(evs, l.e)
	}
	if pos == rb.pos {
		return advance{pos: rb.pos, eventID: rb.eventID}, nil
	}
	poison, err := applyChunk(ctx, tx, rb.m, evs)
	if err != nil {
		return advance{}, err
	}
	bad += len(poison)
	if bad > 0 {
		rb.log.Warn("events left out, as the live projector parks them", "count", bad, "up_to", pos)
	}
	if err := writeCheckpoint(ctx, tx, rb.build+".projector_checkpoints", rb.m.Name(), rb.pos,
		checkpoint{Seq: pos, Version: rb.m.Version(), StreamCreated: rb.created, EventID: id}); err != nil {
		return advance{}, err
	}
	return advance{pos: pos, eventID: id, applied: int64(len(evs))}, nil
}

// retryable: a lock wait that ended (lock_timeout) or a deadlock; the
// transaction did nothing, and trying again may succeed.
func retryable(err error) bool {
	pqErr := (*pq.Error)(nil)
	return errors.As(err, &pqErr) && (pqErr.Code == "55P03" || pqErr.Code == "40P01")
}

// switchOver holds the live read model's writes (reads go on), brings the
// new one to the live one's position, compares them, and switches them if
// they agree or the switch is forced. It reports false when the live one
// had moved too far ahead to catch up while holding its writes, or the
// switch gave up waiting for the live tables: the new read model is then
// where it was, and what the switch read is read again.
func (rb *rebuild) switchOver(ctx context.Context) (bool, error) {
	tables := rb.m.Tables()
	live, build := make([]string, len(tables)), make([]string, len(tables))
	for i, t := range tables {
		live[i], build[i] = rb.live+"."+pq.QuoteIdentifier(t), rb.build+"."+pq.QuoteIdentifier(t)
	}
	tx, err := rb.db.BeginTxx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	final, ready, err := rb.holdLive(ctx, tx, live)
	if !ready || err != nil {
		return false, err
	}
	batch, err := rb.upTo(ctx, final.Seq)
	if err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, `SET LOCAL search_path TO `+rb.build); err != nil {
		return false, err
	}
	to, err := rb.apply(ctx, tx, batch)
	if err != nil {
		return false, err
	}
	rb.res.Position = final.Seq
	rb.reportAt("comparing", true, to)
	if rb.res.Diffs, err = rb.compare(ctx, tx, tables, live, build); err != nil {
		return false, err
	}
	if len(rb.res.Diffs) > 0 && !rb.cfg.Force && !rb.cfg.diverged {
		// Keep what was applied: the next run compares again from here.
		if err := tx.Commit(); err != nil {
			return false, err
		}
		rb.moveTo(to)
		rb.res.Elapsed = time.Since(rb.start)
		rb.report("disagree", true)
		return true, ErrDisagree
	}
	if err := rb.swap(ctx, tx, live, build); err != nil {
		if retryable(err) {
			// lock_timeout or a deadlock: nothing done, try again.
			rb.unread(batch...)
			rb.log.Info("switch waited too long for the live tables; trying again", "err", err)
			return false, nil
		}
		return false, fmt.Errorf("switch: %w", err)
	}
	// The row is held since holdLive, unless there was none: then a first
	// batch may have written one meanwhile, and the switch reads again.
	res, err := tx.ExecContext(ctx, `INSERT INTO `+rb.live+`.projector_checkpoints AS c (name, seq, version, stream_created, event_id)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name) DO UPDATE SET seq = EXCLUDED.seq, version = EXCLUDED.version,
			stream_created = EXCLUDED.stream_created, event_id = EXCLUDED.event_id, updated_at = now()
		WHERE $6`,
		rb.m.Name(), final.Seq, rb.m.Version(), rb.created, final.EventID, final.exists)
	if err != nil {
		return false, fmt.Errorf("switch: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return false, fmt.Errorf("switch: %w", err)
	} else if n == 0 {
		rb.unread(batch...)
		rb.log.Info("a first batch of the live projector came before the switch; trying again")
		return false, nil
	}
	// What is left of the new read model's schema (its checkpoint, the
	// other models' tables) goes with the switch: left for after the
	// commit, a stop in between left a schema that looked like a rebuild
	// to resume, without this model's tables, and every later run failed.
	if _, err := tx.ExecContext(ctx, `DROP SCHEMA `+rb.build+` CASCADE`); err != nil {
		return false, fmt.Errorf("switch: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("switch: %w", err)
	}
	rb.moveTo(to)
	rb.res.Switched, rb.res.Elapsed = true, time.Since(rb.start)
	rb.report("switched", true)
	// A switch changes the read model where the log does not move, as a
	// redrive does (forced, or over a read model that had diverged):
	// every instance forgets what it remembered of it.
	if err := rb.js.Conn().Publish(RedrivenSubject(rb.m.Name()), nil); err != nil {
		rb.log.Warn("tell the instances to forget the replaced read model", "err", err)
	}
	// The old tables: the next run drops them if this fails.
	if _, err := rb.db.ExecContext(ctx, `DROP SCHEMA `+rb.retired+` CASCADE`); err != nil {
		rb.log.Warn("drop the replaced read model", "err", err)
	}
	return true, nil
}

// holdLive holds the writes to the live tables in tx and returns the
// checkpoint the switch brings the new read model to: the live one's, or,
// when that one is wrong, the new one's own. It reports false when the
// switch is to catch up first (its caller rolls tx back): a batch of the
// live projector ended the lock's wait, or the live read model is more
// than a batch ahead.
func (rb *rebuild) holdLive(ctx context.Context, tx *sqlx.Tx, live []string) (final checkpoint, ready bool, err error) {
	// The live checkpoint first, as every writer of the live read model
	// takes it (see writeCheckpoint): a batch under way ends before, and
	// the next waits until the switch is done, even one that writes no
	// table (all of its events parked), which the table locks would let
	// move the checkpoint between its read here and the switch's write.
	lc, err := lockCheckpoint(ctx, tx, rb.live+".projector_checkpoints", rb.m.Name())
	if err != nil {
		return checkpoint{}, false, err
	}
	// EXCLUSIVE lets queries read on; with the checkpoint held, no batch
	// is half done, and the live checkpoint is the live tables' position.
	if _, err := tx.ExecContext(ctx, `LOCK TABLE `+strings.Join(live, ", ")+` IN EXCLUSIVE MODE`); err != nil {
		if retryable(err) {
			// A deadlock with a writer that takes the tables before the
			// checkpoint (an older build's batch, in a rolling deploy):
			// PostgreSQL ended one of the two, here the switch.
			rb.log.Info("switch met a batch of the live projector; trying again", "err", err)
			return checkpoint{}, false, nil
		}
		return checkpoint{}, false, err
	}
	final = lc
	if rb.cfg.diverged {
		final = checkpoint{Seq: rb.pos, EventID: rb.eventID, exists: lc.exists}
	}
	if final.Seq < rb.pos {
		return checkpoint{}, false, fmt.Errorf("the live read model (at %d) went back behind the new one (at %d)", final.Seq, rb.pos)
	}
	if final.Seq-rb.pos > uint64(rb.cfg.Batch) {
		return checkpoint{}, false, nil // catch up without holding the live writes
	}
	return final, true, nil
}

// swap moves the live tables out of the way and the new ones in their
// place, in tx.
func (rb *rebuild) swap(ctx context.Context, tx *sqlx.Tx, live, build []string) error {
	// Moving a table waits for the reads under way, and the reads that
	// come meanwhile wait behind it: a long read makes the switch give up
	// and try again rather than hold the others.
	stmts := []string{`SET LOCAL lock_timeout = '2s'`, `CREATE SCHEMA ` + rb.retired}
	for _, t := range live {
		stmts = append(stmts, `ALTER TABLE `+t+` SET SCHEMA `+rb.retired)
	}
	for _, t := range build {
		stmts = append(stmts, `ALTER TABLE `+t+` SET SCHEMA `+rb.live)
	}
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// compare returns the rows each side holds that the other does not, table
// by table (as multisets: a row twice on one side and once on the other
// differs).
func (rb *rebuild) compare(ctx context.Context, tx *sqlx.Tx, tables, live, build []string) ([]Diff, error) {
	var diffs []Diff
	for i, t := range tables {
		for _, side := range []struct{ name, from, minus string }{{"live", live[i], build[i]}, {"rebuilt", build[i], live[i]}} {
			rows, err := tx.QueryContext(ctx, `SELECT d::text, count(*) OVER () FROM (SELECT * FROM `+side.from+` EXCEPT ALL SELECT * FROM `+side.minus+`) d LIMIT $1`, rb.cfg.MaxDiffs)
			if err != nil {
				return nil, fmt.Errorf("compare %s: %w", t, err)
			}
			d := Diff{Table: t, Side: side.name}
			for rows.Next() {
				var row string
				if err := rows.Scan(&row, &d.Rows); err != nil {
					rows.Close()
					return nil, err
				}
				d.Sample = append(d.Sample, row)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return nil, fmt.Errorf("compare %s: %w", t, err)
			}
			if d.Rows > 0 {
				diffs = append(diffs, d)
			}
		}
	}
	return diffs, nil
}

// report tells cfg.Progress how the rebuild goes, at most every
// ProgressEvery unless final.
func (rb *rebuild) report(phase string, final bool) {
	rb.reportAt(phase, final, advance{pos: rb.pos, eventID: rb.eventID})
}

// reportAt reports the new read model where a batch not committed yet
// brings it (at): what the switch compares is its transaction's.
func (rb *rebuild) reportAt(phase string, final bool, at advance) {
	if rb.cfg.Progress == nil {
		return
	}
	now := time.Now()
	if !final && now.Sub(rb.reported) < rb.cfg.ProgressEvery {
		return
	}
	rb.reported = now
	applied := rb.res.Applied + at.applied
	p := Progress{Phase: phase, Applied: applied, Position: at.pos, Remaining: rb.remain}
	if s := now.Sub(rb.start).Seconds(); s > 0 {
		p.Rate = float64(applied) / s
	}
	if p.Rate > 0 {
		p.ETA = time.Duration(float64(p.Remaining) / p.Rate * float64(time.Second))
	}
	rb.cfg.Progress(p)
}
