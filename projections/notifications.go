package projections

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"astro/events"
)

// Notifications projects inbox events into the notifications table and
// each user's counts into notification_counts.
type Notifications struct {
	insert, read, del, unread, readAll, delAll, counts *sqlx.Stmt
	// A compaction restates an inbox and an erasure empties it: rare, and
	// each made exact rather than fast.
	keepOnly, restate, recount, erase, eraseCounts *sqlx.Stmt
}

// NewNotifications prepares the projector's statements.
func NewNotifications(ctx context.Context, db *sqlx.DB) (*Notifications, error) {
	var p Notifications
	// Runs of sends, reads and deletes (the bulk of the log) are one
	// statement each; every statement says what it changed, which is what
	// the counts move by.
	if err := prepare(ctx, db, "notifications projector", []statement{
		{&p.insert, `INSERT INTO notifications (workspace_id, recipient_id, id, sender_id, notification_type, subject, message, data, create_date, seq)
			SELECT * FROM unnest($1::text[], $2::text[], $3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[], $8::jsonb[], $9::timestamptz[], $10::bigint[])
			ON CONFLICT DO NOTHING
			RETURNING workspace_id, recipient_id, true`},
		{&p.read, `UPDATE notifications n SET read_date = d.at
			FROM unnest($1::text[], $2::text[], $3::uuid[], $4::timestamptz[]) AS d(ws, r, id, at)
			WHERE n.workspace_id = d.ws AND n.recipient_id = d.r AND n.id = d.id AND n.read_date IS NULL
			RETURNING n.workspace_id, n.recipient_id, true`},
		{&p.del, `DELETE FROM notifications n
			USING unnest($1::text[], $2::text[], $3::uuid[]) AS d(ws, r, id)
			WHERE n.workspace_id = d.ws AND n.recipient_id = d.r AND n.id = d.id
			RETURNING n.workspace_id, n.recipient_id, n.read_date IS NULL`},
		{&p.unread, `UPDATE notifications SET read_date = NULL
			WHERE workspace_id = $1 AND recipient_id = $2 AND id = $3 AND read_date IS NOT NULL`},
		{&p.readAll, `UPDATE notifications SET read_date = $4
			WHERE workspace_id = $1 AND recipient_id = $2 AND id = ANY($3::uuid[]) AND read_date IS NULL`},
		{&p.delAll, `WITH d AS (DELETE FROM notifications WHERE workspace_id = $1 AND recipient_id = $2 AND id = ANY($3::uuid[]) RETURNING read_date)
			SELECT count(*), count(*) FILTER (WHERE read_date IS NULL) FROM d`},
		{&p.counts, `INSERT INTO notification_counts AS c (workspace_id, recipient_id, total, unread, seq, events, oldest)
			SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::int[], $5::bigint[], $6::int[], $7::timestamptz[])
			ON CONFLICT (workspace_id, recipient_id) DO UPDATE
			SET total = c.total + EXCLUDED.total, unread = c.unread + EXCLUDED.unread, seq = GREATEST(c.seq, EXCLUDED.seq),
			    events = c.events + EXCLUDED.events, oldest = LEAST(c.oldest, EXCLUDED.oldest)`},
		{&p.keepOnly, `DELETE FROM notifications WHERE workspace_id = $1 AND recipient_id = $2 AND id <> ALL($3::uuid[])`},
		{&p.restate, `INSERT INTO notifications AS n (workspace_id, recipient_id, id, sender_id, notification_type, subject, message, data, create_date, read_date, seq)
			SELECT $1, $2, * FROM unnest($3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[], $8::jsonb[], $9::timestamptz[], $10::timestamptz[], $11::bigint[])
			ON CONFLICT (workspace_id, recipient_id, id) DO UPDATE SET read_date = EXCLUDED.read_date
			WHERE n.read_date IS DISTINCT FROM EXCLUDED.read_date`},
		// A compaction's first part starts the inbox's count of events
		// since, and is the oldest event its log then holds; every part
		// recounts what it restated.
		{&p.recount, `INSERT INTO notification_counts AS c (workspace_id, recipient_id, total, unread, seq, events, oldest)
			SELECT $1, $2, count(*), count(*) FILTER (WHERE read_date IS NULL), $3, 0, $5::timestamptz FROM notifications WHERE workspace_id = $1 AND recipient_id = $2
			ON CONFLICT (workspace_id, recipient_id) DO UPDATE
			SET total = EXCLUDED.total, unread = EXCLUDED.unread, seq = GREATEST(c.seq, EXCLUDED.seq),
			    events = CASE WHEN $4 THEN 0 ELSE c.events END, oldest = CASE WHEN $4 THEN EXCLUDED.oldest ELSE c.oldest END`},
		{&p.erase, `DELETE FROM notifications WHERE workspace_id = $1 AND recipient_id = $2`},
		{&p.eraseCounts, `DELETE FROM notification_counts WHERE workspace_id = $1 AND recipient_id = $2`},
	}); err != nil {
		return nil, err
	}
	return &p, nil
}

// Name implements Projector.
func (*Notifications) Name() string { return NotificationsName }

// Version implements Model. 3: senders and data an older Astro stored
// as they came ("bob", {"taskId":42}) are stored in today's forms. 4: and
// texts with NUL, which were parked (events.NormalText).
func (*Notifications) Version() int { return 4 }

// Tables implements Model: a batch writes notifications first.
func (*Notifications) Tables() []string { return []string{"notifications", "notification_counts"} }

// Subjects implements Projector.
func (*Notifications) Subjects() []string { return []string{events.KindSubjects(events.KindInbox)} }

// Apply implements Projector. Consecutive events of one type form a run,
// applied as one statement; the log's order holds between runs.
func (p *Notifications) Apply(ctx context.Context, tx *sqlx.Tx, evs []events.Event) error {
	b := batch{p: p, tx: tx, counts: map[inboxKey]*countDelta{}}
	for _, e := range evs {
		payload, err := events.Decode(e)
		if err != nil {
			return err
		}
		if err := b.add(ctx, e, payload); err != nil {
			return fmt.Errorf("apply %s (seq %d): %w", e.Type, e.Seq, err)
		}
	}
	if err := b.flush(ctx); err != nil {
		return err
	}
	return b.writeCounts(ctx)
}

type inboxKey struct{ ws, recipient string }

type countDelta struct {
	total, unread int
	seq           uint64
	events        int       // inbox events
	oldest        time.Time // the oldest event's time
}

// batch accumulates a run of one event type as column arrays, and the
// count changes of the whole batch.
type batch struct {
	p      *Notifications
	tx     *sqlx.Tx
	run    string // event type of the pending run
	cols   [8][]string
	data   []sql.NullString
	seq    []int64
	counts map[inboxKey]*countDelta
}

// count is the count change of e's inbox, which e adds to.
func (b *batch) count(ws, recipient string, e events.Event) *countDelta {
	k := inboxKey{ws, recipient}
	d := b.counts[k]
	if d == nil {
		d = &countDelta{oldest: e.Time}
		b.counts[k] = d
	}
	d.seq = max(d.seq, e.Seq)
	d.events++
	if e.Time.Before(d.oldest) {
		d.oldest = e.Time
	}
	return d
}

func (b *batch) add(ctx context.Context, e events.Event, payload events.Payload) error {
	if b.run != "" && b.run != e.Type {
		if err := b.flush(ctx); err != nil {
			return err
		}
	}
	ws := e.WorkspaceID
	push := func(vals ...string) {
		b.run = e.Type
		for i, v := range vals {
			b.cols[i] = append(b.cols[i], v)
		}
	}
	switch v := payload.(type) {
	case *events.NotificationSent:
		// Content is stored as today's Astro would have stored it, whatever
		// an older one wrote (events.NotificationSent.Normal).
		n := v.Normal()
		v = &n
		b.count(ws, v.RecipientID, e)
		push(ws, v.RecipientID, v.NotificationID, v.SenderID, v.NotificationType, v.Subject, v.Message, v.CreateDate.Format(time.RFC3339Nano))
		b.data = append(b.data, sql.NullString{String: string(v.Data), Valid: len(v.Data) > 0})
		b.seq = append(b.seq, int64(e.Seq))
		return nil
	case *events.NotificationRead:
		b.count(ws, v.RecipientID, e)
		push(ws, v.RecipientID, v.NotificationID, v.ReadDate.Format(time.RFC3339Nano))
		return nil
	case *events.NotificationDeleted:
		b.count(ws, v.RecipientID, e)
		push(ws, v.RecipientID, v.NotificationID)
		return nil
	case *events.NotificationUnread:
		d := b.count(ws, v.RecipientID, e)
		res, err := b.tx.StmtxContext(ctx, b.p.unread).ExecContext(ctx, ws, v.RecipientID, v.NotificationID)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		d.unread += int(n)
		return nil
	case *events.AllNotificationsRead:
		d := b.count(ws, v.RecipientID, e)
		res, err := b.tx.StmtxContext(ctx, b.p.readAll).ExecContext(ctx, ws, v.RecipientID, pq.Array(v.NotificationIDs), v.ReadDate)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		d.unread -= int(n)
		return nil
	case *events.AllNotificationsDeleted:
		d := b.count(ws, v.RecipientID, e)
		var total, unread int
		if err := b.tx.StmtxContext(ctx, b.p.delAll).QueryRowContext(ctx, ws, v.RecipientID, pq.Array(v.NotificationIDs)).Scan(&total, &unread); err != nil {
			return err
		}
		d.total -= total
		d.unread -= unread
		return nil
	case *events.InboxCompacted:
		n := v.Normal()
		return b.restate(ctx, ws, e.Seq, e.Time, &n)
	case *events.InboxErased:
		return b.erase(ctx, ws, e.Aggregate.ID)
	}
	return fmt.Errorf("%w: unexpected event %s", ErrUnappliable, e.Type)
}

// settle writes out what the batch holds so far, so a statement that
// reads the tables sees it.
func (b *batch) settle(ctx context.Context) error {
	if err := b.flush(ctx); err != nil {
		return err
	}
	if err := b.writeCounts(ctx); err != nil {
		return err
	}
	clear(b.counts)
	return nil
}

// restate makes the inbox's rows what a compaction part says: the first
// part drops every notification it does not list, each part puts back the
// ones it carries as they are. A projector that kept up changes nothing; one
// that never saw the history (a rebuild from the compacted log) gets the
// inbox whole.
func (b *batch) restate(ctx context.Context, ws string, seq uint64, at time.Time, p *events.InboxCompacted) error {
	if err := b.settle(ctx); err != nil {
		return err
	}
	if p.Part == 1 {
		ids := p.NotificationIDs
		if ids == nil {
			ids = []string{}
		}
		if _, err := b.tx.StmtxContext(ctx, b.p.keepOnly).ExecContext(ctx, ws, p.RecipientID, pq.Array(ids)); err != nil {
			return err
		}
	}
	n := len(p.Notifications)
	ids, senders, types, subjects, messages, creates := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	data, reads, seqs := make([]sql.NullString, n), make([]sql.NullString, n), make([]int64, n)
	for i, c := range p.Notifications {
		ids[i], senders[i], types[i], subjects[i], messages[i] = c.NotificationID, c.SenderID, c.NotificationType, c.Subject, c.Message
		creates[i], seqs[i] = c.CreateDate.Format(time.RFC3339Nano), int64(c.Seq)
		data[i] = sql.NullString{String: string(c.Data), Valid: len(c.Data) > 0}
		if c.ReadDate != nil {
			reads[i] = sql.NullString{String: c.ReadDate.Format(time.RFC3339Nano), Valid: true}
		}
	}
	if _, err := b.tx.StmtxContext(ctx, b.p.restate).ExecContext(ctx, ws, p.RecipientID, pq.Array(ids), pq.Array(senders), pq.Array(types),
		pq.Array(subjects), pq.Array(messages), pq.Array(data), pq.Array(creates), pq.Array(reads), pq.Array(seqs)); err != nil {
		return err
	}
	_, err := b.tx.StmtxContext(ctx, b.p.recount).ExecContext(ctx, ws, p.RecipientID, int64(seq), p.Part == 1, at)
	return err
}

// erase removes every trace of the inbox from the read model.
func (b *batch) erase(ctx context.Context, ws, recipient string) error {
	if err := b.settle(ctx); err != nil {
		return err
	}
	if _, err := b.tx.StmtxContext(ctx, b.p.erase).ExecContext(ctx, ws, recipient); err != nil {
		return err
	}
	_, err := b.tx.StmtxContext(ctx, b.p.eraseCounts).ExecContext(ctx, ws, recipient)
	return err
}

// flush applies the pending run as one statement.
func (b *batch) flush(ctx context.Context) error {
	if b.run == "" {
		return nil
	}
	c := &b.cols
	var stmt *sqlx.Stmt
	var args []any
	// What each changed row does to the counts: a send adds an unread
	// row; a read makes one read; a delete removes one, read or unread
	// (each statement returns whether the row counted as unread).
	var dTotal, dUnread int
	switch b.run {
	case events.NotificationSent{}.EventType():
		stmt, dTotal, dUnread = b.p.insert, 1, 1
		args = []any{pq.Array(c[0]), pq.Array(c[1]), pq.Array(c[2]), pq.Array(c[3]), pq.Array(c[4]), pq.Array(c[5]), pq.Array(c[6]),
			pq.Array(b.data), pq.Array(c[7]), pq.Array(b.seq)}
	case events.NotificationRead{}.EventType():
		stmt, dUnread = b.p.read, -1
		args = []any{pq.Array(c[0]), pq.Array(c[1]), pq.Array(c[2]), pq.Array(c[3])}
	case events.NotificationDeleted{}.EventType():
		stmt, dTotal, dUnread = b.p.del, -1, -1
		args = []any{pq.Array(c[0]), pq.Array(c[1]), pq.Array(c[2])}
	}
	rows, err := b.tx.StmtxContext(ctx, stmt).QueryContext(ctx, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var ws, recipient string
		var unread bool
		if err := rows.Scan(&ws, &recipient, &unread); err != nil {
			return err
		}
		d := b.counts[inboxKey{ws, recipient}]
		d.total += dTotal
		if unread {
			d.unread += dUnread
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	b.run, b.cols, b.data, b.seq = "", [8][]string{}, nil, nil
	return nil
}

// writeCounts applies the batch's count changes, one row a user, in a
// stable order.
func (b *batch) writeCounts(ctx context.Context) error {
	if len(b.counts) == 0 {
		return nil
	}
	keys := make([]inboxKey, 0, len(b.counts))
	for k := range b.counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].ws < keys[j].ws || keys[i].ws == keys[j].ws && keys[i].recipient < keys[j].recipient
	})
	ws, recipient := make([]string, len(keys)), make([]string, len(keys))
	total, unread, seq, evs := make([]int64, len(keys)), make([]int64, len(keys)), make([]int64, len(keys)), make([]int64, len(keys))
	oldest := make([]string, len(keys))
	for i, k := range keys {
		d := b.counts[k]
		ws[i], recipient[i], total[i], unread[i], seq[i], evs[i] = k.ws, k.recipient, int64(d.total), int64(d.unread), int64(d.seq), int64(d.events)
		oldest[i] = d.oldest.Format(time.RFC3339Nano)
	}
	_, err := b.tx.StmtxContext(ctx, b.p.counts).ExecContext(ctx, pq.Array(ws), pq.Array(recipient), pq.Array(total), pq.Array(unread), pq.Array(seq),
		pq.Array(evs), pq.Array(oldest))
	if err != nil {
		return fmt.Errorf("notification counts: %w", err)
	}
	return nil
}
