package query

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"astro/events"
)

// PageSize is the most notifications one Retrieve returns.
const PageSize = 500

// GroupWindow is how close in time notifications of one sender must be to
// be grouped under the newest of them.
const GroupWindow = time.Hour

// NotificationDto is a notification as the public API shows it.
type NotificationDto struct {
	ID               string            `json:"id"`
	SenderID         string            `json:"senderId"`
	Children         []NotificationDto `json:"children"`
	NotificationType string            `json:"notificationType"`
	CreateDate       time.Time         `json:"createDate"`
	Subject          string            `json:"subject"`
	Message          string            `json:"message"`
	ReadDate         *time.Time        `json:"readDate"`
	Data             json.RawMessage   `json:"data"`
}

// NotificationData is the data of a notification as served: what was sent,
// or {} when nothing was. The public document's NotificationDataDto is an
// object, never null, and a strict client refuses a null.
func NotificationData(sent []byte) json.RawMessage {
	if len(sent) == 0 || string(sent) == "null" {
		return json.RawMessage(`{}`)
	}
	return sent
}

// NotificationResponseDto is one page of notifications.
type NotificationResponseDto struct {
	Items       []NotificationDto `json:"items"`
	TotalCount  int               `json:"totalCount"`
	UnreadCount int               `json:"unreadCount"`
}

// NotificationFilter selects a page of a user's notifications.
type NotificationFilter struct {
	Before            uint64   // the log position of the oldest notification of the previous page; 0: the first page
	SenderID          string   // only this sender's
	NotificationTypes []string // only these types
	Flat              bool     // no grouping
}

// Counts are a user's pending and unread notifications as of Seq, the log
// position of the last event of the user's inbox the read model applied.
type Counts struct {
	Total, Unread int
	Seq           uint64
}

// Notifications reads the notifications read model.
type Notifications struct {
	page, counts, seqOf, one *sqlx.Stmt
	// cached counts by workspace and user: the unread badge is the most
	// read thing there is, and a user's counts change only with their
	// inbox's events.
	cached *posCache[Counts]
}

// NewNotifications prepares the statements. seen, when not nil, is what the
// notifications projector of this instance receives, for Current.
func NewNotifications(ctx context.Context, db *sqlx.DB, seen *Seen) (*Notifications, error) {
	q := Notifications{cached: newPosCache[Counts](1<<16, seen)}
	if err := prepare(ctx, db, "notification queries", []statement{
		// The page and the user's counts in one statement, so one snapshot:
		// totalCount is never from a moment other than the items'. The
		// counts come in subqueries, so that the statement locks
		// notifications before notification_counts, in the order a
		// rebuild's switch takes them: the other order deadlocks with it.
		{&q.page, `SELECT
				COALESCE((SELECT total FROM notification_counts WHERE workspace_id = $1 AND recipient_id = $2), 0),
				COALESCE((SELECT unread FROM notification_counts WHERE workspace_id = $1 AND recipient_id = $2), 0),
				COALESCE((SELECT seq FROM notification_counts WHERE workspace_id = $1 AND recipient_id = $2), 0),
				id, sender_id, notification_type, create_date, subject, message, read_date, data
			FROM notifications
			WHERE workspace_id = $1 AND recipient_id = $2 AND ($3::bigint = 0 OR seq < $3)
			  AND ($4 = '' OR sender_id = $4) AND (cardinality($5::text[]) = 0 OR notification_type = ANY($5))
			ORDER BY seq DESC LIMIT ` + fmt.Sprint(PageSize)},
		{&q.counts, `SELECT total, unread, seq FROM notification_counts WHERE workspace_id = $1 AND recipient_id = $2`},
		{&q.seqOf, `SELECT seq FROM notifications WHERE workspace_id = $1 AND recipient_id = $2 AND id = $3`},
		{&q.one, `SELECT id, sender_id, notification_type, create_date, subject, message, read_date, data
			FROM notifications WHERE workspace_id = $1 AND recipient_id = $2 AND id = $3`},
	}); err != nil {
		return nil, err
	}
	return &q, nil
}

// CachedCounts returns a user's counts from memory if they are exact as of
// inbox position at, the last sequence of the user's inbox in the log.
// That position was read after mark (see Mark).
func (q *Notifications) CachedCounts(workspaceID, userID string, mark, at uint64) (Counts, bool) {
	return q.cached.get(inboxKey(workspaceID, userID), at, mark)
}

// Mark is to be taken before the read of the last position of an inbox
// that CachedCounts or Counts is then given (see Seen.Mark).
func (q *Notifications) Mark() uint64 { return q.cached.mark() }

// Counts reads a user's counts from the read model, which has applied the
// inbox's position at, read after mark, and remembers them for
// CachedCounts and Current.
func (q *Notifications) Counts(ctx context.Context, workspaceID, userID string, mark, at uint64) (Counts, error) {
	var c Counts
	epoch := q.cached.epoch()
	err := q.counts.QueryRowxContext(ctx, workspaceID, userID).Scan(&c.Total, &c.Unread, &c.Seq)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return Counts{}, fmt.Errorf("count notifications: %w", err)
	}
	q.remember(workspaceID, userID, c, seenAs{gen: mark, exactTo: max(at, c.Seq)}, epoch)
	return c, nil
}

// Current returns a user's counts from memory without asking the log where
// their inbox is, if they are exact as of the position up to which this
// instance has seen the inbox stream, and that position. The caller must
// then make sure the log holds nothing after it (natslog.Log.After): every
// event up to it either was there when the counts were read or went past
// Seen since, which would have told.
func (q *Notifications) Current(workspaceID, userID string) (Counts, uint64, bool) {
	subject := events.Subject(workspaceID, events.Aggregate{Kind: events.KindInbox, ID: userID})
	return q.cached.current(inboxKey(workspaceID, userID), subject)
}

// remember keeps a user's counts, read after epoch, for CachedCounts, as
// of their position, and for Current, as as says.
func (q *Notifications) remember(workspaceID, userID string, c Counts, as seenAs, epoch uint64) {
	q.cached.put(inboxKey(workspaceID, userID), c.Seq, c, as, epoch)
}

// Forget drops every count remembered: a redrive of the notifications
// projector's parked events changed the read model where the log did not
// move (projections.RedrivenSubject).
func (q *Notifications) Forget() { q.cached.forget() }

// inboxKey names a user's inbox in the counts cache.
func inboxKey(workspaceID, userID string) string { return workspaceID + "/" + userID }

// SeqOf returns the log position of one of a user's pending notifications,
// the key pages are cut by; found is false when none has that id.
func (q *Notifications) SeqOf(ctx context.Context, workspaceID, userID, id string) (seq uint64, found bool, err error) {
	err = q.seqOf.GetContext(ctx, &seq, workspaceID, userID, id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("find a notification's position: %w", err)
	}
	return seq, true, nil
}

// List returns a page of a user's notifications, newest first.
func (q *Notifications) List(ctx context.Context, workspaceID, userID string, f NotificationFilter) (NotificationResponseDto, error) {
	types := f.NotificationTypes
	if types == nil {
		types = []string{}
	}
	epoch := q.cached.epoch()
	rows, err := q.page.QueryxContext(ctx, workspaceID, userID, int64(f.Before), f.SenderID, pq.Array(types))
	if err != nil {
		return NotificationResponseDto{}, fmt.Errorf("list notifications: %w", err)
	}
	defer rows.Close()
	var c Counts
	items := make([]NotificationDto, 0, 16)
	for rows.Next() {
		n, err := scanNotification(countsFirst{rows, &c})
		if err != nil {
			return NotificationResponseDto{}, err
		}
		items = append(items, n)
	}
	if err := rows.Err(); err != nil {
		return NotificationResponseDto{}, fmt.Errorf("list notifications: %w", err)
	}
	if len(items) == 0 {
		// No row to carry the counts: an empty page has no moment to agree with.
		if c, err = q.Counts(ctx, workspaceID, userID, 0, 0); err != nil {
			return NotificationResponseDto{}, err
		}
	} else {
		q.remember(workspaceID, userID, c, seenAs{}, epoch)
	}
	if !f.Flat {
		items = Group(items, GroupWindow)
	}
	return NotificationResponseDto{Items: items, TotalCount: c.Total, UnreadCount: c.Unread}, nil
}

// countsFirst scans a page row whose first columns are the user's counts
// into c, and the rest as a notification.
type countsFirst struct {
	rows *sqlx.Rows
	c    *Counts
}

func (r countsFirst) Scan(dest ...any) error {
	return r.rows.Scan(append([]any{&r.c.Total, &r.c.Unread, &r.c.Seq}, dest...)...)
}

// Get returns one of a user's pending notifications; found is false when
// there is none with that id.
func (q *Notifications) Get(ctx context.Context, workspaceID, userID, id string) (n NotificationDto, found bool, err error) {
	n, err = scanNotification(q.one.QueryRowxContext(ctx, workspaceID, userID, id))
	if errors.Is(err, sql.ErrNoRows) {
		return NotificationDto{}, false, nil
	}
	return n, err == nil, err
}

func scanNotification(row interface{ Scan(...any) error }) (NotificationDto, error) {
	var n NotificationDto
	var data []byte
	if err := row.Scan(&n.ID, &n.SenderID, &n.NotificationType, &n.CreateDate, &n.Subject, &n.Message, &n.ReadDate, &data); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return NotificationDto{}, err
		}
		return NotificationDto{}, fmt.Errorf("scan notification: %w", err)
	}
	n.CreateDate = n.CreateDate.UTC()
	if n.ReadDate != nil {
		t := n.ReadDate.UTC()
		n.ReadDate = &t
	}
	n.Data = NotificationData(data)
	return n, nil
}

// Group nests notifications (newest first) of one sender that came within
// window of the newest of them under that newest one, as its children.
func Group(items []NotificationDto, window time.Duration) []NotificationDto {
	out := make([]NotificationDto, 0, len(items))
	open := map[string]int{} // sender -> index in out of its newest group
	for _, n := range items {
		if i, ok := open[n.SenderID]; ok && out[i].CreateDate.Sub(n.CreateDate) <= window {
			out[i].Children = append(out[i].Children, n)
			continue
		}
		open[n.SenderID] = len(out)
		out = append(out, n)
	}
	return out
}
