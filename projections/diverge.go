package projections

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// check compares the read model's checkpoint with the log before the
// runner consumes. When the log does not hold the history the read model
// was made from, consuming on would skip the new events that reuse its
// sequence numbers: check rebuilds the read model from the log instead,
// here, holding the projector's lock, with the runner not ready meanwhile.
// When the projector's version is newer than the one that built the read
// model, it returns the rebuild to run beside the live one.
func (r *Runner) check(ctx context.Context, stream jetstream.Stream) (func(context.Context), error) {
	info := stream.CachedInfo() // as of the lookup just before
	c, err := readCheckpoint(ctx, r.db, "projector_checkpoints", r.p.Name())
	if err != nil {
		return nil, err
	}
	why, err := diverged(ctx, stream, info, c)
	if err != nil {
		return nil, fmt.Errorf("projector %s: %w", r.p.Name(), err)
	}
	r.created = streamCreated(info)
	m, isModel := r.p.(Model)
	if why == "" {
		switch {
		case !isModel || !c.exists || c.Version == m.Version():
		case c.Version < m.Version():
			return func(ctx context.Context) { r.upgrade(ctx, m, c.Version) }, nil
		default:
			// An instance of the previous release, during a rolling
			// deployment: rebuilding back and forth would help nobody.
			r.cfg.Logger.Warn("a newer projector version built this read model; applying the log to it with this older one",
				"read_model_version", c.Version, "version", m.Version())
		}
		return nil, nil
	}
	r.setReady(false)
	r.setState(StateDiverged)
	r.cfg.Logger.Error("the log does not hold the read model's history; rebuilding the read model from the log",
		"reason", why, "checkpoint", c.Seq, "log_first_seq", info.State.FirstSeq, "log_last_seq", info.State.LastSeq)
	if !isModel {
		return nil, fmt.Errorf("projector %s: the log does not hold the read model's history (%s), and the projector cannot rebuild", r.p.Name(), why)
	}
	res, err := Rebuild(ctx, r.js, r.db, m, RebuildConfig{Stream: r.cfg.Stream, Wait: true, Logger: r.cfg.Logger, diverged: true})
	if err != nil {
		return nil, err
	}
	// The durable consumer's place is in the old history.
	if err := stream.DeleteConsumer(ctx, "projector_"+r.p.Name()); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("projector %s: reset consumer: %w", r.p.Name(), err)
	}
	r.reset(res.Position)
	r.cfg.Logger.Warn("read model rebuilt from the log", "position", res.Position, "events", res.Applied,
		"tables_that_differed", len(res.Diffs), "elapsed", res.Elapsed)
	return nil, nil
}

// reset puts the position where the database's checkpoint is, which may be
// behind where it was: a rebuild left it there, or the database was
// restored.
func (r *Runner) reset(pos uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pos != r.pos {
		r.pos = pos
		close(r.changed)
		r.changed = make(chan struct{})
	}
}

// upgrade rebuilds the read model of a projector whose version changed,
// beside the live one, which this runner keeps applying meanwhile. The two
// differ by design, so the switch is forced; the differences are logged.
func (r *Runner) upgrade(ctx context.Context, m Model, from int) {
	r.cfg.Logger.Info("the projector's version changed; rebuilding its read model beside the live one", "from", from, "to", m.Version())
	r.setState(StateRebuilding)
	for {
		res, err := Rebuild(ctx, r.js, r.db, m, RebuildConfig{Stream: r.cfg.Stream, Force: true, Wait: true, Logger: r.cfg.Logger})
		if err == nil {
			for _, d := range res.Diffs {
				r.cfg.Logger.Info("the new version's read model differs", "table", d.Table, "only_in", d.Side, "rows", d.Rows)
			}
			r.cfg.Logger.Info("switched to the new version's read model", "version", m.Version(), "position", res.Position,
				"events", res.Applied, "elapsed", res.Elapsed)
			r.setState(StateRunning)
			return
		}
		if ctx.Err() != nil {
			return
		}
		r.cfg.Logger.Error("rebuild of the new version failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
}

// standbyCheck is what a standby knows of whether the log holds the
// history of the read model it follows. The instance that writes finds
// out at its start (check) and rebuilds the read model, not ready
// meanwhile; a standby would stay ready on the read model the log no
// longer backs, and its reads would wait for nothing (the checkpoint is
// past positions the log gives again). So it compares too, at most once a
// second: a stream info, and a get of the checkpoint's event.
type standbyCheck struct {
	at  time.Time
	why string
}

// diverged says why the log does not back checkpoint c, as last found.
// A log that does not answer keeps the last answer: its own outage makes
// the instance unready by other ways.
func (f *standbyCheck) diverged(ctx context.Context, r *Runner, c checkpoint) string {
	if time.Since(f.at) < time.Second {
		return f.why
	}
	f.at = time.Now()
	// Bounded: a slow log holds the lock loop, and with it the takeover.
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	stream, err := r.js.Stream(ctx, r.cfg.Stream)
	if err != nil {
		return f.why
	}
	why, err := diverged(ctx, stream, stream.CachedInfo(), c)
	if err != nil {
		return f.why
	}
	if why != "" && f.why == "" {
		r.cfg.Logger.Error("the log does not hold the history of the read model this standby follows; not ready until the writing instance has rebuilt it",
			"reason", why, "checkpoint", c.Seq)
	}
	f.why = why
	return why
}
