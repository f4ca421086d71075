package projections

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"astro/events"
)

// Notifications projects inbox events into the notifications table.
type Notifications struct {
	insert, read, unread, del, readAll, delAll *sqlx.Stmt
}

// NewNotifications prepares the projector's statements.
func NewNotifications(ctx context.Context, db *sqlx.DB) (*Notifications, error) {
	var p Notifications
	if err := prepare(ctx, db, "notifications projector", []statement{
		// Sends are the bulk of the log: a run of them is one statement.
		{&p.insert, `INSERT INTO notifications (workspace_id, recipient_id, id, sender_id, notification_type, subject, message, data, create_date, seq)
			SELECT * FROM unnest($1::text[], $2::text[], $3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[], $8::jsonb[], $9::timestamptz[], $10::bigint[])
			ON CONFLICT DO NOTHING`},
		{&p.read, `UPDATE notifications SET read_date = $4 WHERE workspace_id = $1 AND recipient_id = $2 AND id = $3`},
		{&p.unread, `UPDATE notifications SET read_date = NULL WHERE workspace_id = $1 AND recipient_id = $2 AND id = $3`},
		{&p.del, `DELETE FROM notifications WHERE workspace_id = $1 AND recipient_id = $2 AND id = $3`},
		{&p.readAll, `UPDATE notifications SET read_date = $4 WHERE workspace_id = $1 AND recipient_id = $2 AND id = ANY($3::uuid[]) AND read_date IS NULL`},
		{&p.delAll, `DELETE FROM notifications WHERE workspace_id = $1 AND recipient_id = $2 AND id = ANY($3::uuid[])`},
	}); err != nil {
		return nil, err
	}
	return &p, nil
}

// Name implements Projector.
func (*Notifications) Name() string { return "notifications" }

// Subjects implements Projector.
func (*Notifications) Subjects() []string { return []string{events.KindSubjects(events.KindInbox)} }

// sendRows is a run of NotificationSent as column arrays.
type sendRows struct {
	ws, recipient, id, sender, typ, subject, message []string
	data                                             []sql.NullString
	created                                          []string
	seq                                              []int64
}

func (r *sendRows) add(e events.Event, p *events.NotificationSent) {
	r.ws = append(r.ws, e.WorkspaceID)
	r.recipient = append(r.recipient, p.RecipientID)
	r.id = append(r.id, p.NotificationID)
	r.sender = append(r.sender, p.SenderID)
	r.typ = append(r.typ, p.NotificationType)
	r.subject = append(r.subject, p.Subject)
	r.message = append(r.message, p.Message)
	r.data = append(r.data, sql.NullString{String: string(p.Data), Valid: len(p.Data) > 0})
	r.created = append(r.created, p.CreateDate.Format(time.RFC3339Nano))
	r.seq = append(r.seq, int64(e.Seq))
}

// Apply implements Projector.
func (p *Notifications) Apply(ctx context.Context, tx *sqlx.Tx, evs []events.Event) error {
	var sends sendRows
	flush := func() error {
		if len(sends.id) == 0 {
			return nil
		}
		_, err := tx.StmtxContext(ctx, p.insert).ExecContext(ctx, pq.Array(sends.ws), pq.Array(sends.recipient), pq.Array(sends.id),
			pq.Array(sends.sender), pq.Array(sends.typ), pq.Array(sends.subject), pq.Array(sends.message),
			pq.Array(sends.data), pq.Array(sends.created), pq.Array(sends.seq))
		sends = sendRows{}
		return err
	}
	for _, e := range evs {
		payload, err := events.Decode(e)
		if err != nil {
			return err
		}
		if s, ok := payload.(*events.NotificationSent); ok {
			sends.add(e, s)
			continue
		}
		if err := flush(); err != nil {
			return err
		}
		ws := e.WorkspaceID
		switch v := payload.(type) {
		case *events.NotificationRead:
			_, err = tx.StmtxContext(ctx, p.read).ExecContext(ctx, ws, v.RecipientID, v.NotificationID, v.ReadDate)
		case *events.NotificationUnread:
			_, err = tx.StmtxContext(ctx, p.unread).ExecContext(ctx, ws, v.RecipientID, v.NotificationID)
		case *events.NotificationDeleted:
			_, err = tx.StmtxContext(ctx, p.del).ExecContext(ctx, ws, v.RecipientID, v.NotificationID)
		case *events.AllNotificationsRead:
			_, err = tx.StmtxContext(ctx, p.readAll).ExecContext(ctx, ws, v.RecipientID, pq.Array(v.NotificationIDs), v.ReadDate)
		case *events.AllNotificationsDeleted:
			_, err = tx.StmtxContext(ctx, p.delAll).ExecContext(ctx, ws, v.RecipientID, pq.Array(v.NotificationIDs))
		default:
			err = fmt.Errorf("%w: unexpected event %s", ErrUnappliable, e.Type)
		}
		if err != nil {
			return fmt.Errorf("apply %s (seq %d): %w", e.Type, e.Seq, err)
		}
	}
	return flush()
}
