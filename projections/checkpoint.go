package projections

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// checkpoint is a projector_checkpoints row: how far a read model is, which
// projector version built it, and what identifies the log it followed.
type checkpoint struct {
	Seq           uint64 `db:"seq"`
	Version       int    `db:"version"`
	StreamCreated string `db:"stream_created"` // the stream's creation time, RFC 3339 with nanoseconds
	EventID       string `db:"event_id"`       // Nats-Msg-Id of the event at Seq
	exists        bool
}

// readCheckpoint reads name's row of table (a projector_checkpoints table,
// possibly schema-qualified); a missing row is the zero checkpoint.
func readCheckpoint(ctx context.Context, q sqlx.QueryerContext, table, name string) (checkpoint, error) {
	return selectCheckpoint(ctx, q, table, name, "")
}

// lockCheckpoint reads name's checkpoint as readCheckpoint does, and holds
// its row until tx ends: what a writer does first that applies events
// without moving the checkpoint (a redrive), or moves it by another rule (a
// rebuild's switch); see writeCheckpoint. A missing row locks nothing: no
// batch has committed yet.
func lockCheckpoint(ctx context.Context, tx *sqlx.Tx, table, name string) (checkpoint, error) {
	return selectCheckpoint(ctx, tx, table, name, " FOR UPDATE")
}

func selectCheckpoint(ctx context.Context, q sqlx.QueryerContext, table, name, lock string) (checkpoint, error) {
	var c checkpoint
	err := sqlx.GetContext(ctx, q, &c, `SELECT seq, version, stream_created, event_id FROM `+table+` WHERE name = $1`+lock, name)
	if errors.Is(err, sql.ErrNoRows) {
		return checkpoint{}, nil
	}
	if err != nil {
		return checkpoint{}, fmt.Errorf("projector %s: read checkpoint: %w", name, err)
	}
	c.exists = true
	return c, nil
}

// writeCheckpoint moves name's checkpoint in table from seq from to c.Seq.
// The version and the stream's identity are written when the row is
// created, and by a rebuild's switch: a batch of the live projector does
// not change which version built the read model.
//
// The move is refused with errCheckpointMoved, and the transaction must
// then roll back, when the checkpoint is no longer at from: the writer's
// lock was lost before it noticed (the next ping of its session is up to a
// second away) and another runner applied the log meanwhile, or the
// database was restored to an older checkpoint, or to one from before
// the row was first written. Either way the batch would apply events twice
// or skip some.
//
// Every writer of a read model moves or locks its checkpoint first
// (lockCheckpoint), before it touches a table: the row's lock then orders
// them, a writer that lost its lock cannot interleave with the one that
// took over, and no two wait on each other's tables.
func writeCheckpoint(ctx context.Context, tx *sqlx.Tx, table, name string, from uint64, c checkpoint) error {
	query := `UPDATE ` + table + ` SET seq = $2, event_id = $3, updated_at = now(),
			stream_created = CASE WHEN stream_created = '' THEN $4 ELSE stream_created END
		WHERE name = $1 AND seq = $5`
	args := []any{name, c.Seq, c.EventID, c.StreamCreated, from}
	if from == 0 {
		query = `INSERT INTO ` + table + ` AS c (name, seq, version, stream_created, event_id) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (name) DO UPDATE SET seq = EXCLUDED.seq, event_id = EXCLUDED.event_id, updated_at = now(),
			stream_created = CASE WHEN c.stream_created = '' THEN EXCLUDED.stream_created ELSE c.stream_created END
		WHERE c.seq = 0`
		args = []any{name, c.Seq, c.Version, c.StreamCreated, c.EventID}
	}
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	} else if n == 0 {
		return fmt.Errorf("%w (moving it from %d to %d)", errCheckpointMoved, from, c.Seq)
	}
	return nil
}

// errCheckpointMoved: see writeCheckpoint.
var errCheckpointMoved = errors.New("the checkpoint is not where this writer left it: another runner applied the log, or the database was restored")

// streamCreated is the stream's identity as a checkpoint stores it: a
// stream deleted and created again has a new creation time, while a store
// restored from a backup keeps it.
func streamCreated(info *jetstream.StreamInfo) string {
	return info.Created.UTC().Format(time.RFC3339Nano)
}

// diverged says why the log no longer holds the history a checkpoint was
// made from, or "" when it does as far as can be told: the stream was
// recreated, the log ends before the checkpoint (restored from an older
// backup, or its tail lost), or the event at the checkpoint is another
// event (the log was cut short, then written past the checkpoint again).
func diverged(ctx context.Context, stream jetstream.Stream, info *jetstream.StreamInfo, c checkpoint) (string, error) {
	if c.Seq == 0 {
		return "", nil
	}
	if c.StreamCreated != "" && c.StreamCreated != streamCreated(info) {
		return fmt.Sprintf("the stream was recreated (created %s; the read model followed the stream created %s)", streamCreated(info), c.StreamCreated), nil
	}
	if last := info.State.LastSeq; c.Seq > last {
		return fmt.Sprintf("the read model is at sequence %d but the log ends at %d (restored from an older backup, or its tail was lost)", c.Seq, last), nil
	}
	if c.EventID == "" || c.Seq < info.State.FirstSeq {
		return "", nil // nothing to compare with: an old checkpoint, or the log no longer keeps that event
	}
	m, err := stream.GetMsg(ctx, c.Seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return "", nil // deleted from the log: the history before it is still the same
	}
	if err != nil {
		return "", fmt.Errorf("read the event at the checkpoint: %w", err)
	}
	if id := m.Header.Get(nats.MsgIdHdr); id != c.EventID {
		return fmt.Sprintf("the event at sequence %d is %q, but the read model applied %q there (the log lost events and was written again)", c.Seq, id, c.EventID), nil
	}
	return "", nil
}
