package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"astro/api/auth"
	"astro/commands"
	"astro/commands/notifications"
	"astro/events"
	"astro/query"
)

// The notification stream: GET /api/data/notifications/stream sends the
// caller's unread and total counts as Server-Sent Events, with every change
// to their inbox, each under its log position as the event id.
//
// It follows the log (through the hub, streamhub.go), not this instance's
// memory: the counts come from
// folding the inbox's own events with the inbox aggregate, the fold that
// decides every command and that the read model's counts follow, so the
// count a client shows with event id P is the count unreadcount answers at
// position P, on any instance. A reconnect with Last-Event-ID P is sent the
// inbox's events after P, each with the counts after it; a P the log no
// longer holds gets a fresh snapshot.

// InboxLog is the event log as the stream reads it.
type InboxLog interface {
	// Follow calls fn for every event on filter from the given position
	// on, and waits for new ones until ctx ends.
	Follow(ctx context.Context, filter string, from events.ScanFrom, fn func(events.Event) error) error
	// Read calls fn for each event of subject after position after, up to
	// the log's end.
	Read(ctx context.Context, subject string, after uint64, fn func(events.Event) error) (uint64, error)
	// ReadAll calls fn for every event the log holds on subject, in order.
	ReadAll(ctx context.Context, subject string, fn func(events.Event) error) error
	// End is the last position of the stream that keeps events of kind.
	End(ctx context.Context, kind string) (uint64, error)
	// FirstSeq is the position of the oldest event the log holds on
	// subject: compaction and erasure remove an inbox's early events.
	FirstSeq(ctx context.Context, subject string) (uint64, error)
}

// StreamConfig tunes the notification stream. Zero values take defaults.
type StreamConfig struct {
	// TicketKey signs stream tickets; instances behind one address need
	// the same key. Without one, tickets are refused.
	TicketKey []byte
	TicketTTL time.Duration // how long a ticket opens a stream; default 5m
	PerUser   int           // streams one user (in a workspace) holds on an instance; default 5
	Max       int           // streams an instance holds; default 10,000
	Heartbeat time.Duration // a comment line this often keeps proxies from closing; default 15s
}

func (c *StreamConfig) defaults() {
	if c.TicketTTL <= 0 {
		c.TicketTTL = 5 * time.Minute
	}
	if c.PerUser <= 0 {
		c.PerUser = 5
	}
	if c.Max <= 0 {
		c.Max = 10000
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 15 * time.Second
	}
}

// StreamPath is the stream's path; it runs past the request deadline.
const StreamPath = "/api/data/notifications/stream"

// streams counts the open streams, per caller and in all.
type streams struct {
	perUser, max int

	mu      sync.Mutex
	byUser  map[string]int
	total   int
	closing chan struct{} // closed when the server shuts down
	closed  bool
}

func newStreams(perUser, max int) *streams {
	return &streams{perUser: perUser, max: max, byUser: map[string]int{}, closing: make(chan struct{})}
}

// acquire takes a stream slot of user, or reports why not.
func (st *streams) acquire(user string) (func(), error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case st.closed:
		return nil, commands.Errorf(commands.EUnavailable, "The server is shutting down; reconnect.")
	case st.byUser[user] >= st.perUser:
		return nil, commands.Errorf(commands.ETooManyRequests, "Too many notification streams of this user: at most %d at once.", st.perUser)
	case st.total >= st.max:
		return nil, commands.Errorf(commands.ETooManyRequests, "Too many notification streams on this server; retry in a moment.")
	}
	st.byUser[user]++
	st.total++
	var once sync.Once
	return func() {
		once.Do(func() {
			st.mu.Lock()
			defer st.mu.Unlock()
			if st.byUser[user]--; st.byUser[user] == 0 {
				delete(st.byUser, user)
			}
			st.total--
		})
	}, nil
}

// Open returns how many streams are open.
func (st *streams) open() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.total
}

// CloseStreams ends every notification stream and refuses new ones: for
// http.Server.RegisterOnShutdown, since Shutdown waits for requests to end
// and a stream would not end on its own.
func (s *Server) CloseStreams() {
	s.streams.mu.Lock()
	defer s.streams.mu.Unlock()
	if !s.streams.closed {
		s.streams.closed = true
		close(s.streams.closing)
	}
	s.hub.close()
}

// OpenStreams is how many notification streams are open.
func (s *Server) OpenStreams() int { return s.streams.open() }

// StreamTicketDto answers POST /api/data/notifications/stream/ticket.
type StreamTicketDto struct {
	Ticket    string    `json:"ticket"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// streamTicket issues a ticket for the caller. Only a bearer token gets
// one: a ticket cannot be renewed with itself.
func (s *Server) streamTicket(w http.ResponseWriter, r *http.Request) {
	claims, err := s.streamBearerClaims(r)
	if err == nil && len(s.cfg.Streams.TicketKey) == 0 {
		err = commands.Errorf(commands.EUnavailable, "Stream tickets are not configured on this server.")
	}
	if err == nil {
		err = s.rateLimit(w, claims.WorkspaceID, claims.UserID)
	}
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	now := s.cfg.Now()
	exp := now.Add(s.cfg.Streams.TicketTTL)
	if !claims.ExpiresAt.IsZero() && claims.ExpiresAt.Before(exp) {
		exp = claims.ExpiresAt
	}
	c := ticketClaims{UserID: claims.UserID, WorkspaceID: claims.WorkspaceID, Expires: exp.Unix()}
	if !claims.ExpiresAt.IsZero() {
		c.TokenExpires = claims.ExpiresAt.Unix()
	}
	w.Header().Set("Cache-Control", "no-store")
	writeOK(w, StreamTicketDto{Ticket: signTicket(s.cfg.Streams.TicketKey, c), ExpiresAt: time.Unix(exp.Unix(), 0).UTC()})
}

// streamCaller authenticates a stream request: by the Authorization
// header, or by a ticket in the query string. Never a bearer token in the
// URL: it is refused even when valid, so that no client learns to send it.
func (s *Server) streamCaller(r *http.Request) (commands.Caller, time.Time, error) {
	q := r.URL.Query()
	for _, name := range []string{"access_token", "token", "authorization", "bearer"} {
		if q.Has(name) {
			return commands.Caller{}, time.Time{}, &commands.Error{Code: commands.EUnauthorized,
				Message: "Authentication failed: a bearer token never goes in a URL; send it in the Authorization header, or get a stream ticket (POST " + StreamPath + "/ticket) and pass ?ticket=."}
		}
	}
	if t := q.Get("ticket"); t != "" && r.Header.Get("Authorization") == "" {
		c, err := verifyTicket(s.cfg.Streams.TicketKey, t, s.cfg.Now())
		if err != nil {
			return commands.Caller{}, time.Time{}, &commands.Error{Code: commands.EUnauthorized, Message: "Authentication failed: " + err.Error() + ".", Err: err}
		}
		var exp time.Time
		if c.TokenExpires != 0 {
			exp = time.Unix(c.TokenExpires, 0)
		}
		return commands.Caller{UserID: c.UserID, WorkspaceID: c.WorkspaceID, CorrelationID: r.Header.Get("X-Request-Id")}, exp, nil
	}
	claims, err := s.streamBearerClaims(r)
	if err != nil {
		return commands.Caller{}, time.Time{}, err
	}
	return commands.Caller{UserID: claims.UserID, WorkspaceID: claims.WorkspaceID, Scopes: claims.Scopes, CorrelationID: r.Header.Get("X-Request-Id")}, claims.ExpiresAt, nil
}

// StreamCountsDto is the data of a snapshot event.
type StreamCountsDto struct {
	UnreadCount int `json:"unreadCount"`
	TotalCount  int `json:"totalCount"`
}

// StreamChangeDto is the data of a change event: what changed and the
// counts after it.
type StreamChangeDto struct {
	Change          string                 `json:"change"` // sent, read, unread, deleted, allRead, allDeleted
	UnreadCount     int                    `json:"unreadCount"`
	TotalCount      int                    `json:"totalCount"`
	NotificationIDs []string               `json:"notificationIds"`
	Notification    *query.NotificationDto `json:"notification,omitempty"` // sent only
	ReadDate        *time.Time             `json:"readDate,omitempty"`     // read and allRead
	Reason          string                 `json:"reason,omitempty"`       // deleted and allDeleted: user, overflow, bulk
}

// StreamEndDto is the data of the event that ends a stream.
type StreamEndDto struct {
	Reason  string `json:"reason"` // expired
	Message string `json:"message"`
}

// notificationStream serves GET /api/data/notifications/stream.
func (s *Server) notificationStream(w http.ResponseWriter, r *http.Request) {
	if err := s.openStream(w, r); err != nil {
		writeError(w, r, s.log, err)
	}
}

// openStream returns an error only before the stream's first byte.
func (s *Server) openStream(w http.ResponseWriter, r *http.Request) error {
	a, err := s.admitStream(w, r)
	if err != nil {
		return err
	}
	defer a.release()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if isHead(r) {
		// The stream's head is all a HEAD gets; it must not hold a
		// stream, so it is answered before the subscription and the
		// inbox's load, with the status a GET gets: its slot and its
		// position are checked as a GET's are.
		if _, err := s.streamFirst(ctx, a.subject, a.from); err != nil {
			return err
		}
		s.startEvents(w, a.ws)
		return nil
	}

	// Subscribe first: what the log holds after the state startFold reads
	// is read from the log (catchUp), everything later comes through the
	// hub.
	f, unsubscribe, err := s.hub.subscribe(ctx, a.subject)
	if err != nil {
		return unavailable(err)
	}
	defer unsubscribe()
	first, err := s.streamFirst(ctx, a.subject, a.from)
	if err != nil {
		return err
	}
	fold, err := s.startFold(ctx, a.subject, a.from, first)
	if err != nil {
		return err
	}

	sw := s.startEvents(w, a.ws)
	// A write under way when the server shuts down gets the goodbye's
	// deadline at once: a client that stopped reading would else hold the
	// shutdown for the whole grace, and every request then cut off.
	done, exited := make(chan struct{}), make(chan struct{})
	defer func() { close(done); <-exited }() // the writer is the server's again once this returns
	go func() {
		defer close(exited)
		select {
		case <-s.streams.closing:
			sw.mu.Lock()
			_ = sw.rc.SetWriteDeadline(time.Now().Add(goodbyeTimeout))
			sw.mu.Unlock()
		case <-done:
		}
	}()
	// Reconnect after a second when the server ends the stream (a restart).
	sw.raw("retry: 1000\n\n")
	if s.catchUp(ctx, sw, a.subject, fold) {
		s.follow(ctx, sw, f, fold, a.expires)
	}
	return nil
}

// streamAdmission is a stream request let in: whose inbox it follows,
// until when, from where, and the slot it holds.
type streamAdmission struct {
	subject string
	ws      string    // whose positions the stream seals
	expires time.Time // of the token behind the stream; zero when it has none
	from    streamFrom
	release func() // gives the slot back
}

// admitStream authenticates a stream request, checks it, and takes a
// stream slot for it, or answers why not.
func (s *Server) admitStream(w http.ResponseWriter, r *http.Request) (streamAdmission, error) {
	c, expires, err := s.streamCaller(r)
	if err != nil {
		return streamAdmission{}, err
	}
	if err := singleValued(r.URL.Query(), "ticket", "lastEventId"); err != nil {
		return streamAdmission{}, err
	}
	if err := s.rateLimit(w, c.WorkspaceID, c.UserID); err != nil {
		return streamAdmission{}, err
	}
	after, resume := s.lastEventID(r, c)
	release, err := s.streams.acquire(c.WorkspaceID + "/" + c.UserID)
	if err != nil {
		if commands.ErrorCode(err) == commands.ETooManyRequests {
			w.Header().Set("Retry-After", "5")
		}
		return streamAdmission{}, err
	}
	return streamAdmission{subject: inboxSubject(c), ws: c.WorkspaceID, expires: expires, from: streamFrom{after: after, resume: resume}, release: release}, nil
}

// streamFrom is where a client asks its stream to start: after the
// position it saw last, when it resumes.
type streamFrom struct {
	after  uint64
	resume bool
}

// snapshot reports whether the client gets a snapshot rather than the
// events after its position, first being the position of the oldest event
// the log holds of the inbox: a new client, or one whose position the log
// no longer holds (compacted or erased since, or cut by limits).
func (p streamFrom) snapshot(first uint64) bool {
	return !p.resume || p.after+1 < first || first == 0
}

// streamFirst is the position of the oldest event the log holds of the
// inbox, which decides whether the client's position is resumed from. A
// position it would resume from past the log's end is refused: that cannot
// come from this stream. (One it would not resume from gets a snapshot,
// from which the client starts afresh whatever it sent.)
func (s *Server) streamFirst(ctx context.Context, subject string, from streamFrom) (uint64, error) {
	first, err := s.cfg.InboxLog.FirstSeq(ctx, subject)
	if err != nil {
		return 0, unavailable(err)
	}
	if !from.snapshot(first) && from.after > 0 {
		last, err := s.cfg.InboxLog.End(ctx, events.KindInbox)
		if err != nil {
			return 0, unavailable(err)
		}
		if from.after > last {
			return 0, commands.Invalid(map[string][]string{"Last-Event-ID": {"The log has no such position yet."}})
		}
	}
	return first, nil
}

// startFold reads the state a stream starts from, first being the
// position streamFirst answered: what the log holds of the inbox after it
// is read next (catchUp), sent or not as the client's position says.
func (s *Server) startFold(ctx context.Context, subject string, from streamFrom, first uint64) (*streamFold, error) {
	fold := &streamFold{log: s.log, subject: subject}
	err := s.cfg.Inboxes.Load(ctx, subject, func(cur *notifications.Inbox, seq uint64) error {
		switch {
		case from.snapshot(first):
			// The snapshot is of the log's end, not of this instance's
			// copy, which may be older: writes another instance took
			// since, perhaps compacted away since (a compaction folds
			// without a word: it restates what the client has), would be
			// missing from it. So everything folds silently, and the
			// snapshot goes out once the log is read (catchUp).
			fold.in, fold.applied, fold.silent, fold.snapshot = cur.Clone(), seq, math.MaxUint64, true
		case seq <= from.after:
			// This instance's copy may be older than what the client saw
			// (another instance took the writes since): fold on from it,
			// sending only what follows the client's position.
			fold.in, fold.applied, fold.silent = cur.Clone(), seq, from.after
		default:
			// Missed events: rebuild the state at after from the inbox's
			// own events, sending only those after it. What the log holds
			// of an inbox from its first event on rebuilds it: a compaction
			// restates everything before it.
			fold.in, fold.applied, fold.silent = notifications.NewInbox(), 0, from.after
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	fold.shown = fold.counts()
	return fold, nil
}

// startEvents answers the stream's head. Event ids are positions of
// workspace ws, sealed.
func (s *Server) startEvents(w http.ResponseWriter, ws string) *sseWriter {
	// The stream outlives the server's request deadlines; each write gets
	// its own, so a client that stops reading cannot hold it forever.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	sw := &sseWriter{w: w, rc: rc, timeout: 2 * s.cfg.Streams.Heartbeat, closing: s.streams.closing,
		id: func(seq uint64) string { return s.seal.Seal(ws, InboxPositions, seq) }}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: pass each event on at once
	w.WriteHeader(http.StatusOK)
	return sw
}

// catchUp sends what the log holds of the inbox after the fold's state,
// then the snapshot when one is due. It reports whether the stream goes
// on.
func (s *Server) catchUp(ctx context.Context, sw *sseWriter, subject string, fold *streamFold) bool {
	if _, err := s.cfg.InboxLog.Read(ctx, subject, fold.applied, func(e events.Event) error {
		return sw.fold(fold, e)
	}); err != nil {
		if ctx.Err() == nil && sw.err == nil {
			s.log.Warn("notification stream: reading the log failed", "subject", subject, "err", err)
		}
		return false
	}
	return sw.send(fold.caughtUp()) == nil && sw.flush() == nil
}

// follow sends the inbox's events as the hub hands them over, until the
// token behind the stream expires, the server shuts down, the hub lets go
// of the stream, or the client leaves.
func (s *Server) follow(ctx context.Context, sw *sseWriter, f *follower, fold *streamFold, expires time.Time) {
	heartbeat := time.NewTicker(s.cfg.Streams.Heartbeat)
	defer heartbeat.Stop()
	var expired <-chan time.Time
	if !expires.IsZero() {
		t := time.NewTimer(expires.Sub(s.cfg.Now()))
		defer t.Stop()
		expired = t.C
	}
	for {
		select {
		case e := <-f.events:
			if sw.fold(fold, e) != nil {
				return
			}
			// More already waiting go out in the same write.
			if len(f.events) > 0 {
				continue
			}
		case <-heartbeat.C:
			sw.raw(": heartbeat\n\n")
		case <-expired:
			sw.event("end", 0, StreamEndDto{Reason: "expired", Message: "The token behind this stream has expired; open a new stream with a fresh token or ticket."})
			_ = sw.flush()
			return
		case <-s.streams.closing:
			// The client reconnects (with Last-Event-ID) to a server that is
			// up: nothing is lost.
			sw.raw(": server shutting down\n\n")
			_ = sw.flush()
			return
		case <-f.dropped:
			// Too far behind, or the hub lost the log: the client
			// reconnects with its last event id and misses nothing.
			_ = sw.flush()
			return
		case <-ctx.Done():
			return
		}
		if err := sw.flush(); err != nil {
			return
		}
	}
}

// streamFold is a stream's copy of the inbox and what its client was
// shown of it. It folds each event once, in log order, whether the event
// comes from the log or through the hub, and says what the client is sent
// for it.
type streamFold struct {
	log     *slog.Logger
	subject string

	in       *notifications.Inbox
	applied  uint64 // the position in holds the state at
	silent   uint64 // events up to this one fold without being sent
	snapshot bool   // a snapshot is due once the log is read (caughtUp)
	// shown is the counts the client has: those of its last event, or of
	// the position it resumes from.
	shown StreamCountsDto
}

// streamEvent is what a stream sends for an event; a zero one sends
// nothing.
type streamEvent struct {
	name string // snapshot or notification
	id   uint64
	data any
}

func (f *streamFold) counts() StreamCountsDto {
	return StreamCountsDto{UnreadCount: f.in.Unread(), TotalCount: f.in.Len()}
}

// apply folds e and says what to send for it: nothing when it is already
// in or the client has it.
func (f *streamFold) apply(e events.Event) (streamEvent, error) {
	if e.Seq <= f.applied {
		return streamEvent{}, nil
	}
	if err := f.in.Apply(e); err != nil {
		f.log.Error("notification stream: event does not fold", "subject", f.subject, "seq", e.Seq, "err", err)
		return streamEvent{}, err
	}
	f.applied = e.Seq
	if e.Seq <= f.silent {
		f.shown = f.counts()
		return streamEvent{}, nil
	}
	switch e.Type {
	case events.InboxCompacted{}.EventType():
		// It restates what the client has, unless the stream missed an
		// event the compaction erased before it came here (the hub
		// behind, a reconnect racing the compaction): then the counts
		// after its last part differ from the client's, and a snapshot
		// sets them right. (Counts first: the part is decoded only
		// when they differ, as they do between a compaction's parts.)
		if f.counts() == f.shown {
			return streamEvent{}, nil
		}
		if last, err := lastPart(e); err != nil || !last {
			return streamEvent{}, err
		}
		f.shown = f.counts()
		return streamEvent{name: "snapshot", id: e.Seq, data: f.shown}, nil
	case events.InboxErased{}.EventType():
		f.shown = f.counts()
		return streamEvent{name: "snapshot", id: e.Seq, data: f.shown}, nil
	}
	change, err := changeOf(e, f.in)
	if err != nil {
		f.log.Error("notification stream: event does not decode", "subject", f.subject, "seq", e.Seq, "err", err)
		return streamEvent{}, err
	}
	f.shown = f.counts()
	return streamEvent{name: "notification", id: e.Seq, data: change}, nil
}

// caughtUp is what to send once the log is read up to where the hub took
// over: the snapshot, when one is due, and from then on every event.
func (f *streamFold) caughtUp() streamEvent {
	if !f.snapshot {
		return streamEvent{}
	}
	f.snapshot, f.silent = false, 0
	f.shown = f.counts()
	return streamEvent{name: "snapshot", id: f.applied, data: f.shown}
}

// lastPart reports whether e, an InboxCompacted, is its compaction's last
// part: the inbox is whole again only after it.
func lastPart(e events.Event) (bool, error) {
	p, err := events.Decode(e)
	if err != nil {
		return false, err
	}
	part, ok := p.(*events.InboxCompacted)
	return ok && part.Part == part.Parts, nil
}

// lastEventID is the position a reconnecting client of c saw last: the
// Last-Event-ID header EventSource sends, or lastEventId in the query for
// a new EventSource that resumes where an old one stopped, as the stream
// sealed it. An id that does not open (an instance's under another key,
// an older build's bare number) starts the client afresh, with a
// snapshot, as a new one: EventSource gives up for good on a refusal.
func (s *Server) lastEventID(r *http.Request, c commands.Caller) (after uint64, resume bool) {
	v := strings.TrimSpace(r.Header.Get("Last-Event-ID"))
	if v == "" {
		v = strings.TrimSpace(r.URL.Query().Get("lastEventId"))
	}
	if v == "" {
		return 0, false
	}
	return s.seal.Open(c.WorkspaceID, InboxPositions, v)
}

// changeOf describes event e, already folded into in.
func changeOf(e events.Event, in *notifications.Inbox) (StreamChangeDto, error) {
	p, err := events.Decode(e)
	if err != nil {
		return StreamChangeDto{}, err
	}
	d := StreamChangeDto{UnreadCount: in.Unread(), TotalCount: in.Len()}
	switch p := p.(type) {
	case *events.NotificationSent:
		// As the list serves it: in today's forms, also when an older
		// Astro wrote it (events.NotificationSent.Normal).
		n := SentDto(p.Normal())
		d.Change, d.NotificationIDs, d.Notification = "sent", []string{p.NotificationID}, &n
	case *events.NotificationRead:
		at := p.ReadDate.UTC()
		d.Change, d.NotificationIDs, d.ReadDate = "read", []string{p.NotificationID}, &at
	case *events.NotificationUnread:
		d.Change, d.NotificationIDs = "unread", []string{p.NotificationID}
	case *events.NotificationDeleted:
		d.Change, d.NotificationIDs, d.Reason = "deleted", []string{p.NotificationID}, p.Reason
	case *events.AllNotificationsRead:
		at := p.ReadDate.UTC()
		d.Change, d.NotificationIDs, d.ReadDate = "allRead", p.NotificationIDs, &at
	case *events.AllNotificationsDeleted:
		d.Change, d.NotificationIDs, d.Reason = "allDeleted", p.NotificationIDs, p.Reason
	default:
		return d, fmt.Errorf("unexpected event %s", e.Type)
	}
	if d.NotificationIDs == nil {
		d.NotificationIDs = []string{}
	}
	return d, nil
}

// sseWriter writes Server-Sent Events. The first error sticks: the client
// is gone, and flush reports it.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	closing <-chan struct{}         // closed when the server shuts down
	id      func(seq uint64) string // an event's id, its position sealed
	err     error
	// mu orders a write's deadline with the one the shutdown sets, so
	// that none is set longer after it.
	mu sync.Mutex
}

// goodbyeTimeout bounds a stream's writes once the server shuts down.
const goodbyeTimeout = time.Second

func (sw *sseWriter) raw(s string) {
	if sw.err != nil {
		return
	}
	timeout := sw.timeout
	sw.mu.Lock()
	select {
	case <-sw.closing:
		timeout = goodbyeTimeout
	default:
	}
	sw.err = sw.rc.SetWriteDeadline(time.Now().Add(timeout))
	sw.mu.Unlock()
	if sw.err == nil {
		_, sw.err = sw.w.Write([]byte(s))
	}
}

// event writes one event; id 0 writes none, so the client keeps its last.
func (sw *sseWriter) event(name string, id uint64, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		sw.err = errors.Join(sw.err, err)
		return
	}
	var sb strings.Builder
	if id > 0 {
		sb.WriteString("id: " + sw.id(id) + "\n")
	}
	sb.WriteString("event: " + name + "\ndata: ")
	sb.Write(b) // JSON has no raw newline: one data line
	sb.WriteString("\n\n")
	sw.raw(sb.String())
}

// send writes ev, when it is one, and reports the first error.
func (sw *sseWriter) send(ev streamEvent) error {
	if ev.name == "" {
		return nil
	}
	sw.event(ev.name, ev.id, ev.data)
	return sw.err
}

// fold folds e into f and sends what f says to: it fails when e does not
// fold, or the client is gone.
func (sw *sseWriter) fold(f *streamFold, e events.Event) error {
	ev, err := f.apply(e)
	if err != nil {
		return err
	}
	return sw.send(ev)
}

func (sw *sseWriter) flush() error {
	if sw.err == nil {
		sw.err = sw.rc.Flush()
	}
	return sw.err
}

// bearerClaims verifies the request's bearer token.
func (s *Server) bearerClaims(r *http.Request) (auth.Claims, error) {
	token, err := auth.FromHeader(r.Header.Get("Authorization"))
	if err == nil {
		now := s.cfg.Now()
		claims, ok := s.tokens.get(token, now)
		if ok {
			return claims, nil
		}
		if claims, err = s.cfg.Verifier.Verify(r.Context(), token); err == nil {
			s.tokens.put(token, claims, now)
			return claims, nil
		}
	}
	msg := "Authentication failed"
	if reason := auth.Reason(err); reason != "" {
		msg += ": " + reason
	}
	return auth.Claims{}, &commands.Error{Code: commands.EUnauthorized, Message: msg + ".", Err: err}
}

// streamBearerClaims verifies the bearer token of a stream or a ticket
// request, which also refuses a token whose exp is not after now. The
// verifier's leeway lets such a token through, for clock skew, but what it
// buys here ends at that exp: a ticket already expired, a stream ended at
// once, and EventSource reconnecting every second until the leeway is
// over. A 401 instead makes the client refresh its token.
func (s *Server) streamBearerClaims(r *http.Request) (auth.Claims, error) {
	claims, err := s.bearerClaims(r)
	if err == nil && !claims.ExpiresAt.IsZero() && !claims.ExpiresAt.After(s.cfg.Now()) {
		return auth.Claims{}, &commands.Error{Code: commands.EUnauthorized, Message: "Authentication failed: token expired."}
	}
	return claims, err
}

// rateLimit spends one of the caller's requests.
func (s *Server) rateLimit(w http.ResponseWriter, workspaceID, userID string) error {
	retry, err := s.cfg.RateLimiter.Take(workspaceID, userID)
	if err != nil {
		s.metrics.RateLimited()
		w.Header().Set("Retry-After", strconv.Itoa(retry))
	}
	return err
}
