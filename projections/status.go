package projections

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/nats-io/nats.go/jetstream"

	"astro/events"
)

// State is what a runner is doing with its projector.
type State string

// The states of a runner. One instance runs a projector; the others stand
// by, following its checkpoint. Seen from outside any instance (astro
// projections status), a projector that no instance runs is stopped.
const (
	StateStarting State = "starting"
	// StateRunning: this instance applies the log.
	StateRunning State = "running"
	// StateStandby: another instance applies it; this one follows its
	// checkpoint and takes over when it stops.
	StateStandby State = "standby"
	// StateRebuilding: a new version of the read model is being built
	// beside the live one, which keeps serving and following the log.
	StateRebuilding State = "rebuilding"
	// StateDiverged: the log does not hold the history the read model was
	// made from; it is being rebuilt from the log, and is not ready.
	StateDiverged State = "diverged"
	StateStopped  State = "stopped"
)

// States lists every state, so that a metric can show each (1 for the
// current one, 0 for the others).
func States() []State {
	return []State{StateStarting, StateRunning, StateStandby, StateRebuilding, StateDiverged, StateStopped}
}

// Status is where a projector stands against the log.
type Status struct {
	Projector string `json:"projector"`
	State     State  `json:"state"`
	Position  uint64 `json:"position"` // last stream sequence applied
	LogLast   uint64 `json:"logLastSeq"`
	// LagEvents is how many events of the projector's subjects are not
	// applied yet; LagSeconds the age of the oldest of them (0 when none).
	LagEvents  uint64  `json:"lagEvents"`
	LagSeconds float64 `json:"lagSeconds"`
	// ReadsWaiting is how many reads of this instance wait for the
	// projector to apply their writes (0 where only the database is read).
	ReadsWaiting int64 `json:"readsWaiting"`
}

// Status measures the runner's lag against the log. It asks JetStream
// (the stream, the projector's consumer, the oldest unapplied event), so
// it is for probes and scrapes, not for every request.
func (r *Runner) Status(ctx context.Context) (Status, error) {
	st := Status{Projector: r.p.Name(), State: r.State(), Position: r.Position(), ReadsWaiting: r.waiting.Load()}
	return measure(ctx, r.js, r.cfg.Stream, r.p.Subjects(), r.cfg.Now(), st)
}

// ReadStatus is a registered projector's status as any machine that
// reaches the log and the database sees it: the checkpoint from the
// database, the lag from JetStream, and running or stopped from whether an
// instance holds the projector's lock.
func ReadStatus(ctx context.Context, js jetstream.JetStream, db *sqlx.DB, stream string, reg Registration, now time.Time) (Status, error) {
	st := Status{Projector: reg.Name, State: StateStopped}
	err := db.GetContext(ctx, &st.Position, `SELECT COALESCE((SELECT seq FROM projector_checkpoints WHERE name = $1), 0)`, reg.Name)
	if err != nil {
		return st, fmt.Errorf("projector %s: read checkpoint: %w", reg.Name, err)
	}
	// pg_locks shows a one-bigint advisory key split in two 32-bit halves.
	var held bool
	err = db.GetContext(ctx, &held, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = hashtext($1)::bigint)`, lockKey(reg.Name))
	if err != nil {
		return st, fmt.Errorf("projector %s: lock: %w", reg.Name, err)
	}
	if held {
		st.State = StateRunning
	}
	var subjects []string
	for _, k := range reg.Kinds {
		subjects = append(subjects, events.KindSubjects(k))
	}
	return measure(ctx, js, stream, subjects, now, st)
}

func measure(ctx context.Context, js jetstream.JetStream, streamName string, subjects []string, now time.Time, st Status) (Status, error) {
	stream, err := js.Stream(ctx, streamName)
	if err != nil {
		return st, fmt.Errorf("projector %s: stream: %w", st.Projector, err)
	}
	st.LogLast = stream.CachedInfo().State.LastSeq
	// The durable consumer counts what it has not delivered and what is
	// delivered but not acknowledged, which the runner does only after the
	// batch's commit: together, the events not applied.
	cons, err := stream.Consumer(ctx, consumerName(st.Projector))
	switch {
	case err == nil:
		info := cons.CachedInfo()
		st.LagEvents = info.NumPending + uint64(info.NumAckPending)
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		// Never started: at most every event after the checkpoint.
		st.LagEvents = st.LogLast - min(st.Position, st.LogLast)
	default:
		return st, fmt.Errorf("projector %s: consumer: %w", st.Projector, err)
	}
	for _, subject := range subjects {
		m, err := stream.GetMsg(ctx, st.Position+1, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return st, fmt.Errorf("projector %s: oldest unapplied event: %w", st.Projector, err)
		}
		st.LagSeconds = max(st.LagSeconds, now.Sub(m.Time).Seconds())
	}
	return st, nil
}

func lockKey(projector string) string { return "astro.projector." + projector }

func consumerName(projector string) string { return "projector_" + projector }
