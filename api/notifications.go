package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/julienschmidt/httprouter"

	"astro/api/idempotency"
	"astro/commands"
	"astro/commands/notifications"
	"astro/events"
	"astro/query"
)

// NotificationUnreadCountDto is spec 2.4.
type NotificationUnreadCountDto struct {
	UnreadCount int `json:"unreadCount"`
}

// NotificationTotalCountDto answers GET /notifications/count.
type NotificationTotalCountDto struct {
	TotalCount int `json:"totalCount"`
}

// NotificationTimestampDto answers mark read and mark all read (mark
// unread answers no data).
type NotificationTimestampDto struct {
	Timestamp time.Time `json:"timestamp"`
}

func (s *Server) notificationRoutes() {
	const base = "/api/data/notifications"
	rt := s.router
	rt.GET(base, s.authed(s.listNotifications))
	rt.POST(base, s.authed(s.sendNotification))
	// /unreadcount and /count.
	counts := s.authed(func(w http.ResponseWriter, r *http.Request, p httprouter.Params, c commands.Caller) error {
		switch p.ByName("name") {
		case "unreadcount":
			return s.unreadCount(w, r, c)
		case "count":
			return s.notificationCount(w, r, c)
		}
		return notFoundRoute(r)
	})
	// /stream authenticates on its own (a ticket) and holds no read slot.
	rt.named(http.MethodGet, base+"/:name", "name", []string{"unreadcount", "count", "stream"}, func(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
		if p.ByName("name") == "stream" {
			s.notificationStream(w, r)
			return
		}
		counts(w, r, p)
	})
	// /markallread, and /{id}/markread, /{id}/markunread.
	rt.POST(base+"/:name", s.authed(func(w http.ResponseWriter, r *http.Request, p httprouter.Params, c commands.Caller) error {
		if p.ByName("name") != "markallread" {
			return notFoundRoute(r)
		}
		at, res, err := s.cfg.Notifications.MarkAllRead.Handle(r.Context(), notifications.MarkAllRead{Caller: c})
		return s.answerTimestamp(w, c, at, res, err)
	}))
	marks := s.authed(func(w http.ResponseWriter, r *http.Request, p httprouter.Params, c commands.Caller) error {
		id := p.ByName("name")
		switch p.ByName("action") {
		case "markread":
			at, res, err := s.cfg.Notifications.MarkRead.Handle(r.Context(), notifications.MarkRead{Caller: c, NotificationID: id})
			return s.answerTimestamp(w, c, at, res, err)
		case "markunread":
			// The public document answers AstroResult here, without data:
			// unlike a read, an unread notification has no date to show.
			res, err := s.cfg.Notifications.MarkUnread.Handle(r.Context(), notifications.MarkUnread{Caller: c, NotificationID: id})
			return s.answerEmpty(w, c, res, err)
		}
		return notFoundRoute(r)
	})
	// /stream/ticket takes only the bearer token.
	rt.POST(base+"/:name/:action", func(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
		if p.ByName("name") == "stream" && p.ByName("action") == "ticket" {
			s.streamTicket(w, r)
			return
		}
		marks(w, r, p)
	})
	// /deleteall, and /delete/{id}.
	rt.DELETE(base+"/:name", s.authed(func(w http.ResponseWriter, r *http.Request, p httprouter.Params, c commands.Caller) error {
		if p.ByName("name") != "deleteall" {
			return notFoundRoute(r)
		}
		res, err := s.cfg.Notifications.DeleteAll.Handle(r.Context(), notifications.DeleteAll{Caller: c})
		return s.answerEmpty(w, c, res, err)
	}))
	rt.DELETE(base+"/:name/:id", s.authed(func(w http.ResponseWriter, r *http.Request, p httprouter.Params, c commands.Caller) error {
		if p.ByName("name") != "delete" {
			return notFoundRoute(r)
		}
		res, err := s.cfg.Notifications.Delete.Handle(r.Context(), notifications.Delete{Caller: c, NotificationID: p.ByName("id")})
		return s.answerEmpty(w, c, res, err)
	}))
}

// cleanText reports whether s can reach the database as text: valid UTF-8
// and no control characters (PostgreSQL refuses NUL outright).
func cleanText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, unicode.IsControl)
}

func notFoundRoute(r *http.Request) error {
	return commands.Errorf(commands.ENotFound, "No such endpoint: %s.", r.URL.Path)
}

func (s *Server) unreadCount(w http.ResponseWriter, r *http.Request, c commands.Caller) error {
	n, err := s.counts(w, r, c)
	if err != nil {
		return err
	}
	writeOK(w, NotificationUnreadCountDto{UnreadCount: n.Unread})
	return nil
}

func (s *Server) notificationCount(w http.ResponseWriter, r *http.Request, c commands.Caller) error {
	n, err := s.counts(w, r, c)
	if err != nil {
		return err
	}
	writeOK(w, NotificationTotalCountDto{TotalCount: n.Total})
	return nil
}

// counts are the caller's counts as of the last event of their inbox. When
// memory holds them as of that very event they are exact, and the read
// model need not be asked. (A request that names a position goes the long
// way, where the position is checked.)
func (s *Server) counts(w http.ResponseWriter, r *http.Request, c commands.Caller) (query.Counts, error) {
	if n, ok := s.seenCounts(r, c); ok {
		return n, nil
	}
	q := s.cfg.NotificationQueries
	mark := q.Mark()
	at, err := s.lastSeq(r, inboxSubject(c))
	if err != nil {
		return query.Counts{}, err
	}
	if n, ok := q.CachedCounts(c.WorkspaceID, c.UserID, mark, at); ok && r.Header.Get(HeaderMinPosition) == "" {
		return n, nil
	}
	if err := s.await(w, r, s.cfg.NotificationsProjected, at); err != nil {
		return query.Counts{}, err
	}
	return q.Counts(r.Context(), c.WorkspaceID, c.UserID, mark, at)
}

// seenCounts is the caller's counts as this instance has seen their inbox
// go past in the inbox stream, when the log holds nothing after the
// position seen: one get that finds nothing, where the long way reads the
// inbox's last event (whose headers the server builds and the client
// decodes, to give one number). Not when this instance's own appends are
// under way or not seen yet (the log would hold them), or with a position
// to check.
func (s *Server) seenCounts(r *http.Request, c commands.Caller) (query.Counts, bool) {
	if r.Header.Get(HeaderMinPosition) != "" {
		return query.Counts{}, false
	}
	last, settled := s.cfg.Log.Settled(events.KindInbox)
	if !settled {
		return query.Counts{}, false
	}
	n, upTo, ok := s.cfg.NotificationQueries.Current(c.WorkspaceID, c.UserID)
	if !ok || upTo < last {
		return query.Counts{}, false
	}
	more, err := s.cfg.Log.After(r.Context(), events.KindInbox, upTo)
	return n, err == nil && !more
}

func (s *Server) listNotifications(w http.ResponseWriter, r *http.Request, _ httprouter.Params, c commands.Caller) error {
	q := r.URL.Query()
	if err := singleValued(q, "lastId", "senderId", "asFlatList"); err != nil {
		return err
	}
	lastID := q.Get("lastId")
	var f query.NotificationFilter
	v := commands.Validation{}
	if lastID != "" && !events.ValidUUID(lastID) {
		v.Add("lastId", "lastId must be a UUID.")
	}
	// As a send names its sender: a UUID lower-cased, another id by its
	// name-based UUID, so ?senderId=bob finds what "bob" sent; what a send
	// refuses ('{…}', ' bob') is refused here too, rather than finding
	// nothing.
	if sender := q.Get("senderId"); sender != "" {
		var ok bool
		if f.SenderID, ok = events.UUIDFor(sender); !ok {
			v.Add("senderId", "senderId must be the sender's UUID, such as 123e4567-e89b-12d3-a456-426614174000, or another id of "+events.NameRule+".")
		}
	}
	// Both notificationTypes=a,b and notificationTypes=a&notificationTypes=b.
	// A value with a comma also stands for itself: a send takes a type that
	// holds one, and the public document's form explodes the list, so a
	// client asking for "a,b" may mean that type.
	for _, value := range q["notificationTypes"] {
		types := strings.Split(value, ",")
		if len(types) > 1 {
			types = append(types, value)
		}
		for _, t := range types {
			if t = strings.TrimSpace(t); t != "" {
				f.NotificationTypes = append(f.NotificationTypes, t)
			}
			if !cleanText(t) {
				v.Add("notificationTypes", "notificationTypes must be text without control characters.")
			}
		}
	}
	if flat := q.Get("asFlatList"); flat != "" {
		b, err := strconv.ParseBool(flat)
		if err != nil {
			v.Add("asFlatList", "asFlatList must be true or false.")
		}
		f.Flat = b
	}
	if err := v.Err(); err != nil {
		return err
	}
	if err := s.fresh(w, r, s.cfg.NotificationsProjected, inboxSubject(c)); err != nil {
		return err
	}
	if lastID != "" {
		var err error
		if f.Before, err = s.pageAfter(r.Context(), c, strings.ToLower(lastID)); err != nil {
			return err
		}
	}
	page, err := s.cfg.NotificationQueries.List(r.Context(), c.WorkspaceID, c.UserID, f)
	if err != nil {
		return err
	}
	writeOK(w, page)
	return nil
}

func (s *Server) sendNotification(w http.ResponseWriter, r *http.Request, _ httprouter.Params, c commands.Caller) error {
	var req SendRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	cmd, err := req.Command(c)
	if err != nil {
		return err
	}
	sent, res, err := s.cfg.Notifications.Send.Handle(r.Context(), cmd)
	if err != nil {
		return err
	}
	dto, err := s.sends.Answer(r.Context(), c, sent, res)
	if err != nil {
		return err
	}
	s.setPosition(w, c, InboxPositions, res.Seq)
	writeOK(w, dto)
	return nil
}

// pageAfter is the log position the page after notification id (the
// oldest of the page before) ends below. The read model has it, unless the
// user deleted it since that page: a client scrolling on after a deletion
// asks for just that. Its inbox's log still tells where it was delivered,
// in its NotificationSent or, after a compaction, in the compaction's
// restatement, until the next compaction leaves it out.
func (s *Server) pageAfter(ctx context.Context, c commands.Caller, id string) (uint64, error) {
	seq, found, err := s.cfg.NotificationQueries.SeqOf(ctx, c.WorkspaceID, c.UserID, id)
	if err != nil || found {
		return seq, err
	}
	if uid, ok := events.ParseUUID(id); ok {
		if seq, err = notifications.DeliveredAt(ctx, s.cfg.InboxLog, inboxSubject(c), uid); err != nil {
			return 0, unavailable(err)
		}
	}
	if seq == 0 {
		return 0, commands.Invalid(map[string][]string{"lastId": {"lastId is not one of your notifications; start again without it."}})
	}
	return seq, nil
}

// SendAnswers answers sends on every transport.
type SendAnswers struct {
	Queries   *query.Notifications
	Projected Waiter
	Wait      time.Duration // longest wait for the read model
	Log       *slog.Logger
}

// Answer is the answer to a send that returned sent and res. A new
// notification is answered from the event. One delivered before under the
// same Idempotency-Key, whose record has gone (expired, or given up when
// the store was full), is answered as it was stored if this request asks
// for exactly that, and refused as any reused key is otherwise: echoing
// this request would show content the user never got.
func (a SendAnswers) Answer(ctx context.Context, c commands.Caller, sent events.NotificationSent, res commands.Result) (query.NotificationDto, error) {
	if len(res.Events) > 0 {
		return SentDto(sent), nil
	}
	wait, cancel := context.WithTimeout(ctx, a.Wait)
	defer cancel()
	if err := a.Projected.WaitFor(wait, res.Seq); err != nil {
		return query.NotificationDto{}, &commands.Error{Code: commands.EUnavailable, Message: "The data is still being updated; try again in a moment.", Err: err}
	}
	stored, found, err := a.Queries.Get(ctx, c.WorkspaceID, sent.RecipientID, sent.NotificationID)
	switch {
	case err != nil:
		return query.NotificationDto{}, unavailable(err)
	case !found:
		// Nothing appended, and the read model does not show it: this
		// request's events were already in the log (the log's duplicate
		// window recognised their key-derived ids) from an earlier attempt,
		// and the notification has been deleted since. It was delivered as
		// this request asks; answer so.
		a.Log.Debug("a send's notification was delivered and deleted since; answering from the request",
			"notification", sent.NotificationID, "workspace", c.WorkspaceID, "recipient", sent.RecipientID, "inbox_position", res.Seq)
		return SentDto(sent), nil
	case !sameContent(stored, sent):
		return query.NotificationDto{}, IdempotencyError(idempotency.ErrMismatch)
	}
	return stored, nil
}

// sameContent reports whether stored is what sent asks to deliver. The
// read model keeps data as jsonb, which reorders keys and drops spaces, so
// data compares as values.
func sameContent(stored query.NotificationDto, sent events.NotificationSent) bool {
	if stored.SenderID != sent.SenderID || stored.NotificationType != sent.NotificationType ||
		stored.Subject != sent.Subject || stored.Message != sent.Message {
		return false
	}
	var a, b any
	return json.Unmarshal(query.NotificationData(stored.Data), &a) == nil &&
		json.Unmarshal(query.NotificationData(sent.Data), &b) == nil && reflect.DeepEqual(a, b)
}

// SentDto is the NotificationDto of a notification just sent.
func SentDto(e events.NotificationSent) query.NotificationDto {
	return query.NotificationDto{
		ID: e.NotificationID, SenderID: e.SenderID, NotificationType: e.NotificationType,
		CreateDate: e.CreateDate, Subject: e.Subject, Message: e.Message, Data: query.NotificationData(e.Data),
	}
}

func (s *Server) answerTimestamp(w http.ResponseWriter, c commands.Caller, at time.Time, res commands.Result, err error) error {
	if err != nil {
		return err
	}
	s.setPosition(w, c, InboxPositions, res.Seq)
	writeOK(w, NotificationTimestampDto{Timestamp: at})
	return nil
}

func (s *Server) answerEmpty(w http.ResponseWriter, c commands.Caller, res commands.Result, err error) error {
	if err != nil {
		return err
	}
	s.setPosition(w, c, InboxPositions, res.Seq)
	writeOK(w, nil)
	return nil
}
