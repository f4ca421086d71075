package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"astro/api"
)

const streamPath = "/api/data/notifications/stream"

// sseEvent is one Server-Sent Event, or a comment line.
type sseEvent struct {
	ID      string
	Name    string
	Data    json.RawMessage
	Comment string
}

func (e sseEvent) seq(t testing.TB) uint64 {
	t.Helper()
	n, ok := openPosition(t, api.InboxPositions, e.ID)
	if !ok {
		t.Fatalf("event %s: id %q is not a position", e.Name, e.ID)
	}
	return n
}

// openPosition is the position of stream a test service sealed as token
// in workspace w1.
func openPosition(t testing.TB, stream api.PositionStream, token string) (uint64, bool) {
	t.Helper()
	seal, err := api.NewPositionSeal([]byte(testTicketKey))
	if err != nil {
		t.Fatal(err)
	}
	return seal.Open("w1", stream, token)
}

// sealPosition is position seq of stream as a test service seals it in
// workspace w1.
func sealPosition(t testing.TB, stream api.PositionStream, seq uint64) string {
	t.Helper()
	seal, err := api.NewPositionSeal([]byte(testTicketKey))
	if err != nil {
		t.Fatal(err)
	}
	return seal.Seal("w1", stream, seq)
}

// streamChange is the data of a notification or snapshot event.
type streamChange struct {
	Change          string           `json:"change"`
	UnreadCount     int              `json:"unreadCount"`
	TotalCount      int              `json:"totalCount"`
	NotificationIDs []string         `json:"notificationIds"`
	Notification    *notificationDto `json:"notification"`
	Reason          string           `json:"reason"`
}

func (e sseEvent) change(t testing.TB) streamChange {
	t.Helper()
	var c streamChange
	if err := json.Unmarshal(e.Data, &c); err != nil {
		t.Fatalf("event %s: data %s: %v", e.Name, e.Data, err)
	}
	return c
}

// sseStream is an open stream, read in the background.
type sseStream struct {
	t      testing.TB
	events chan sseEvent // closed when the stream ends
	close  func()
}

// stream opens the notification stream with tok in the Authorization
// header (none when empty) and query appended to the path. It answers the
// open stream, or the envelope of a refusal.
func (s *service) stream(tok, query string, headers ...string) (*sseStream, envelope) {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", s.base+streamPath+query, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	// No client timeout: it would cut the stream.
	resp, err := (&http.Client{Transport: s.client.Transport}).Do(req)
	if err != nil {
		cancel()
		s.t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		defer cancel()
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		env := envelope{Status: resp.StatusCode, Header: resp.Header, raw: raw}
		if err := json.Unmarshal(raw, &env); err != nil {
			s.t.Fatalf("stream: %d, body is not an envelope: %v\n%s", resp.StatusCode, err, raw)
		}
		checkEnvelope(s.t, "GET "+streamPath, env)
		return nil, env
	}
	st := &sseStream{t: s.t, events: make(chan sseEvent, 4096), close: func() { cancel(); resp.Body.Close() }}
	s.t.Cleanup(st.close)
	go st.read(resp.Body)
	return st, envelope{Status: 200, Header: resp.Header}
}

func (st *sseStream) read(body io.Reader) {
	defer close(st.events)
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var e sseEvent
	for sc.Scan() {
		line := sc.Text()
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch {
		case line == "":
			if e.Name != "" || e.Data != nil {
				st.events <- e
			}
			e = sseEvent{}
		case field == "":
			st.events <- sseEvent{Comment: value}
		case field == "id":
			e.ID = value
		case field == "event":
			e.Name = value
		case field == "data":
			e.Data = json.RawMessage(value)
		}
	}
}

// nextAny is the next event or comment; it fails the test when the stream
// ends or nothing comes within a deadline.
func (st *sseStream) nextAny() sseEvent {
	st.t.Helper()
	select {
	case e, ok := <-st.events:
		if !ok {
			st.t.Fatal("the stream ended")
		}
		return e
	case <-time.After(30 * time.Second):
		st.t.Fatal("no event within 30 s")
	}
	return sseEvent{}
}

// next is the next event, past comments.
func (st *sseStream) next() sseEvent {
	st.t.Helper()
	for {
		if e := st.nextAny(); e.Comment == "" {
			return e
		}
	}
}

// ended waits for the end of the stream, and returns the events before it.
func (st *sseStream) ended() []sseEvent {
	st.t.Helper()
	var evs []sseEvent
	deadline := time.After(30 * time.Second)
	for {
		select {
		case e, ok := <-st.events:
			if !ok {
				return evs
			}
			if e.Comment == "" {
				evs = append(evs, e)
			}
		case <-deadline:
			st.t.Fatal("the stream did not end within 30 s")
		}
	}
}

// positionOf is the position a notification write in workspace w1
// answered.
func positionOf(t testing.TB, e envelope) uint64 {
	t.Helper()
	p, ok := openPosition(t, api.InboxPositions, e.Header.Get("X-Astro-Position"))
	if !ok {
		t.Fatalf("X-Astro-Position %q is not a position of w1", e.Header.Get("X-Astro-Position"))
	}
	return p
}

// counts are the caller's unread and total counts, as the queries answer.
func (s *service) counts(tok string) (unread, total int) {
	s.t.Helper()
	var u struct{ UnreadCount int }
	var c struct{ TotalCount int }
	s.call("GET", "/api/data/notifications/unreadcount", tok, nil).want(s.t, 200).decode(s.t, &u)
	s.call("GET", "/api/data/notifications/count", tok, nil).want(s.t, 200).decode(s.t, &c)
	return u.UnreadCount, c.TotalCount
}

func sendBody(recipient string) map[string]any {
	return map[string]any{"recipientId": recipient, "senderId": idOf("bob"), "notificationType": "task", "subject": "Task", "message": "A task"}
}

// TestNotificationStreamFollowsTheInbox makes every kind of change to one
// inbox, with other inboxes changing in between, and holds each event of
// the stream to the write that caused it: its id is the write's position,
// and its counts are what unreadcount and count answer after the write.
// Then it reconnects from the middle, and from the end.
func TestNotificationStreamFollowsTheInbox(t *testing.T) {
	s := startService(t)
	svc, alice := sender(t, "w1"), token(t, "alice", "w1")
	svc2 := sender(t, "w2")
	var ids []string
	sendTo := func() envelope {
		e := s.call("POST", sendPath, svc, sendBody("alice")).want(t, 200)
		var n notificationDto
		e.decode(t, &n)
		ids = append(ids, n.ID)
		return e
	}
	first := sendTo()

	st, _ := s.stream(alice, "")
	snap := st.next()
	if snap.Name != "snapshot" || snap.seq(t) != positionOf(t, first) {
		t.Fatalf("first event %s id %s, want a snapshot at %d", snap.Name, snap.ID, positionOf(t, first))
	}
	if c := snap.change(t); c.UnreadCount != 1 || c.TotalCount != 1 {
		t.Fatalf("snapshot counts %d/%d, want 1/1", c.UnreadCount, c.TotalCount)
	}

	steps := []struct {
		change string
		write  func() envelope
	}{
		{"sent", sendTo},
		{"sent", sendTo},
		{"read", func() envelope {
			return s.call("POST", "/api/data/notifications/"+ids[0]+"/markread", alice, nil).want(t, 200)
		}},
		{"unread", func() envelope {
			return s.call("POST", "/api/data/notifications/"+ids[0]+"/markunread", alice, nil).want(t, 200)
		}},
		{"read", func() envelope {
			return s.call("POST", "/api/data/notifications/"+ids[1]+"/markread", alice, nil).want(t, 200)
		}},
		{"allRead", func() envelope { return s.call("POST", "/api/data/notifications/markallread", alice, nil).want(t, 200) }},
		{"sent", sendTo},
		{"deleted", func() envelope {
			return s.call("DELETE", "/api/data/notifications/delete/"+ids[2], alice, nil).want(t, 200)
		}},
		{"allDeleted", func() envelope { return s.call("DELETE", "/api/data/notifications/deleteall", alice, nil).want(t, 200) }},
		{"sent", sendTo},
	}
	var seen []sseEvent
	for i, step := range steps {
		// Other inboxes: bob's in w1, and alice's in another workspace.
		s.call("POST", sendPath, svc, sendBody("bob")).want(t, 200)
		s.call("POST", sendPath, svc2, sendBody("alice")).want(t, 200)
		pos := positionOf(t, step.write())
		e := st.next()
		c := e.change(t)
		if e.Name != "notification" || e.seq(t) != pos || c.Change != step.change {
			t.Fatalf("step %d: event %s %s at %s, want notification %s at %d", i, e.Name, c.Change, e.ID, step.change, pos)
		}
		if unread, total := s.counts(alice); c.UnreadCount != unread || c.TotalCount != total {
			t.Fatalf("step %d (%s): stream counts %d/%d, queries answer %d/%d", i, step.change, c.UnreadCount, c.TotalCount, unread, total)
		}
		if step.change == "sent" && (c.Notification == nil || c.Notification.ID != ids[len(ids)-1]) {
			t.Fatalf("step %d: sent event carries %+v, want notification %s", i, c.Notification, ids[len(ids)-1])
		}
		seen = append(seen, e)
	}

	// A reconnect from the middle gets exactly what came after, byte for
	// byte, then live events.
	for _, how := range []struct{ query, header string }{{"", seen[3].ID}, {"?lastEventId=" + seen[3].ID, ""}} {
		var headers []string
		if how.header != "" {
			headers = []string{"Last-Event-ID", how.header}
		}
		again, _ := s.stream(alice, how.query, headers...)
		for _, want := range seen[4:] {
			got := again.next()
			if got.ID != want.ID || got.Name != want.Name || string(got.Data) != string(want.Data) {
				t.Fatalf("resumed after %s: got %s %s %s, want %s %s %s", seen[3].ID, got.ID, got.Name, got.Data, want.ID, want.Name, want.Data)
			}
		}
		pos := positionOf(t, sendTo())
		if e := again.next(); e.seq(t) != pos || e.change(t).Change != "sent" {
			t.Fatalf("live after resuming: %s at %s, want sent at %d", e.change(t).Change, e.ID, pos)
		}
		again.close()
		seen = append(seen, st.next())
	}

	// A reconnect from the end gets nothing until the next change.
	last, _ := s.stream(alice, "", "Last-Event-ID", seen[len(seen)-1].ID)
	pos := positionOf(t, s.call("POST", "/api/data/notifications/"+ids[len(ids)-1]+"/markread", alice, nil).want(t, 200))
	if e := last.next(); e.seq(t) != pos || e.change(t).Change != "read" {
		t.Fatalf("resumed at the end: first event %s at %s, want read at %d", e.change(t).Change, e.ID, pos)
	}

	// Overflow: a send to a full inbox deletes the oldest first. The
	// stream is read as each send is answered, as a live client reads it:
	// a stream that falls more than the hub's buffer behind is dropped, by
	// design, for the client to reconnect with its last event id
	// (api/streamhub.go); on a loaded machine a thousand unread sends did.
	overflow := 0
	var c streamChange
	for range 1000 {
		sent := positionOf(t, sendTo())
		for {
			e := st.next()
			c = e.change(t)
			if c.Change == "deleted" && c.Reason == "overflow" {
				overflow++
				if c.TotalCount != 999 {
					t.Fatalf("overflow deletion leaves %d pending, want 999 (then the send makes 1,000)", c.TotalCount)
				}
			}
			if e.seq(t) == sent {
				break
			}
		}
	}
	if unread, total := s.counts(alice); c.UnreadCount != unread || c.TotalCount != total || total != 1000 {
		t.Fatalf("after the overflow: stream %d/%d, queries %d/%d", c.UnreadCount, c.TotalCount, unread, total)
	}
	if overflow != 3 {
		t.Fatalf("%d overflow deletions on the stream, want 3", overflow)
	}
}

// TestNotificationStreamBadPositions: a Last-Event-ID that is no position
// this stream gave (garbage, a bare number as an older build gave, another
// workspace's, one sealed under another key, a holiday write's) starts the client afresh with
// a snapshot, as a new client: EventSource gives up for good on a refusal.
// One past the log's end, which no stream of this log gave, is refused.
func TestNotificationStreamBadPositions(t *testing.T) {
	s := startService(t)
	alice := token(t, "alice", "w1")
	s.call("POST", sendPath, sender(t, "w1"), sendBody("alice")).want(t, 200)
	other := s.call("POST", sendPath, sender(t, "w2"), sendBody("alice")).want(t, 200).Header.Get("X-Astro-Position")
	holidayWrite := s.call("POST", "/api/data/holidays", alice, map[string]any{"reason": "Off", "type": "global", "dateFrom": "2027-02-01", "dateTo": "2027-02-01"}).
		want(t, 200).Header.Get("X-Astro-Position")
	otherKey, err := api.NewPositionSeal([]byte("another instance's key, of 32 bytes or more"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ query, header string }{
		{"", "abc"},
		{"", "-1"},
		{"", "1"},
		{"", other},
		{"", otherKey.Seal("w1", api.InboxPositions, 1)},
		{"", holidayWrite}, // another stream's: its number is no position of the inboxes
		{"", sealPosition(t, api.HistoryPositions, 1)},
		{"?lastEventId=x", ""},
	} {
		var headers []string
		if c.header != "" {
			headers = []string{"Last-Event-ID", c.header}
		}
		st, env := s.stream(alice, c.query, headers...)
		if st == nil {
			t.Fatalf("%q %q: HTTP %d, want a stream from a snapshot: %s", c.query, c.header, env.Status, env.raw)
		}
		if e := st.next(); e.Name != "snapshot" || e.change(t).TotalCount != 1 {
			t.Fatalf("%q %q: first event %s %s, want a snapshot of 1", c.query, c.header, e.Name, e.Data)
		}
		st.close()
	}
	_, env := s.stream(alice, "", "Last-Event-ID", sealPosition(t, api.InboxPositions, 999999))
	env.want(t, 400)
	if _, ok := env.Error.ValidationErrors["Last-Event-ID"]; !ok {
		t.Fatalf("past the log's end: validation errors %v, want one for Last-Event-ID", env.Error.ValidationErrors)
	}
}

// A new stream's snapshot is of the log, not of the instance's copy of
// the inbox: another instance took writes since and compacted them away,
// and the stream sent the old copy's counts (the compaction folded without
// a word), every new stream on that instance alike.
func TestNotificationStreamSnapshotAfterAnotherInstanceCompacted(t *testing.T) {
	a := startService(t)
	env := maps.Clone(a.env)
	env["ASTRO_DATA_DIR"] = t.TempDir()
	env["ASTRO_ERASE_WITHIN"] = "2s" // compacts within a second or two
	b := startWithEnv(t, env)
	svc, alice := sender(t, "w1"), token(t, "alice", "w1")

	st, _ := a.stream(alice, "") // a has alice's inbox: empty
	if c := st.next().change(t); c.TotalCount != 0 {
		t.Fatalf("first snapshot: %+v", c)
	}
	st.close()
	for range 3 {
		b.call("POST", sendPath, svc, sendBody("alice")).want(t, 200)
	}
	a.waitCompacted("alice")
	st, _ = a.stream(alice, "")
	defer st.close()
	if e := st.next(); e.Name != "snapshot" || e.change(t).TotalCount != 3 || e.change(t).UnreadCount != 3 {
		t.Fatalf("a new stream on a: %s %s, want a snapshot of 3 unread of 3", e.Name, e.Data)
	}
}

// TestNotificationStreamAcrossInstances: a stream on one instance carries
// the writes answered by another, and a position the log no longer holds
// gets a fresh snapshot.
func TestNotificationStreamAcrossInstances(t *testing.T) {
	a := startService(t)
	env := maps.Clone(a.env)
	env["ASTRO_DATA_DIR"] = t.TempDir()
	b := startWithEnv(t, env)
	svc, alice := sender(t, "w1"), token(t, "alice", "w1")

	st, _ := b.stream(alice, "")
	if e := st.next(); e.Name != "snapshot" || e.change(t).TotalCount != 0 {
		t.Fatalf("first event %s %s, want an empty snapshot", e.Name, e.Data)
	}
	var last sseEvent
	for i := range 20 {
		pos := positionOf(t, a.call("POST", sendPath, svc, sendBody("alice")).want(t, 200))
		last = st.next()
		if last.seq(t) != pos || last.change(t).TotalCount != i+1 {
			t.Fatalf("send %d on a: b's stream has %s at %s, want total %d at %d", i, last.Data, last.ID, i+1, pos)
		}
	}
	st.close()

	// b's copy of alice's inbox is as old as the first stream (a took every
	// write since); a reconnect to b at the newest position still counts on
	// from there.
	resumed, _ := b.stream(alice, "", "Last-Event-ID", last.ID)
	pos := positionOf(t, a.call("POST", sendPath, svc, sendBody("alice")).want(t, 200))
	if e := resumed.next(); e.seq(t) != pos || e.change(t).TotalCount != 21 {
		t.Fatalf("resumed on b: %s at %s, want total 21 at %d", e.Data, e.ID, pos)
	}
	resumed.close()
	last.ID = sealPosition(t, api.InboxPositions, pos)

	// Others write on, and limits cut the log's head past alice's last.
	for range 10 {
		a.call("POST", sendPath, svc, sendBody("bob")).want(t, 200)
	}
	js, err := jetstream.New(a.connectNATS())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stream, err := js.Stream(ctx, "ASTRO_INBOXES")
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.CachedInfo().Config
	cfg.MaxMsgs = 5
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// On a, which holds alice's inbox in memory: the log itself no longer
	// holds her events (as after a compaction or an erasure), so the
	// client gets the state whole.
	again, _ := a.stream(alice, "", "Last-Event-ID", last.ID)
	e := again.next()
	if c := e.change(t); e.Name != "snapshot" || c.TotalCount != 21 || c.UnreadCount != 21 || e.seq(t) != last.seq(t) {
		t.Fatalf("resumed below the log's head: %s %s at %s, want a snapshot of 21/21 at %s", e.Name, e.Data, e.ID, last.ID)
	}
}

// TestNotificationStreamTickets: a browser's way in. A ticket opens the
// stream of its own user only; it is no bearer token, and a bearer token
// in the URL is refused.
func TestNotificationStreamTickets(t *testing.T) {
	s := startService(t)
	svc, alice := sender(t, "w1"), token(t, "alice", "w1")
	var tk struct {
		Ticket    string    `json:"ticket"`
		ExpiresAt time.Time `json:"expiresAt"`
	}
	s.call("POST", streamPath+"/ticket", alice, nil).want(t, 200).decode(t, &tk)
	if until := time.Until(tk.ExpiresAt); tk.Ticket == "" || until <= 0 || until > 6*time.Minute {
		t.Fatalf("ticket %q expires in %v, want minutes", tk.Ticket, until)
	}

	st, _ := s.stream("", "?ticket="+tk.Ticket)
	if e := st.next(); e.Name != "snapshot" {
		t.Fatalf("first event %s, want snapshot", e.Name)
	}
	s.call("POST", sendPath, svc, sendBody("bob")).want(t, 200)
	pos := positionOf(t, s.call("POST", sendPath, svc, sendBody("alice")).want(t, 200))
	if e := st.next(); e.seq(t) != pos {
		t.Fatalf("event at %s, want alice's send at %d", e.ID, pos)
	}

	refused := []struct {
		name, tok, query string
	}{
		{"bearer token in the URL", "", "?access_token=" + alice},
		{"bearer token as ticket", "", "?ticket=" + alice},
		{"tampered ticket", "", "?ticket=" + strings.Replace(tk.Ticket, "_e", "_f", 1) + "x"},
		{"no credentials", "", ""},
	}
	for _, c := range refused {
		if st, env := s.stream(c.tok, c.query); st != nil {
			t.Fatalf("%s: stream opened", c.name)
		} else {
			env.want(t, 401)
		}
	}
	s.call("GET", "/api/data/notifications/unreadcount", tk.Ticket, nil).want(t, 401)
	s.call("POST", streamPath+"/ticket", tk.Ticket, nil).want(t, 401)
	s.call("POST", streamPath+"/ticket", "", nil).want(t, 401)
}

// TestNotificationStreamEndsWhenTheTokenExpires: never silently.
func TestNotificationStreamEndsWhenTheTokenExpires(t *testing.T) {
	s := startService(t)
	short, err := signWith(testSecret, "carol", "w1", time.Now(), 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var tk struct{ Ticket string }
	s.call("POST", streamPath+"/ticket", short, nil).want(t, 200).decode(t, &tk)
	byHeader, _ := s.stream(short, "")
	byTicket, _ := s.stream("", "?ticket="+tk.Ticket)
	for name, st := range map[string]*sseStream{"header": byHeader, "ticket": byTicket} {
		evs := st.ended()
		if len(evs) != 2 || evs[0].Name != "snapshot" || evs[1].Name != "end" || !strings.Contains(string(evs[1].Data), `"reason":"expired"`) {
			t.Fatalf("by %s: events %+v, want a snapshot, then the end saying the token expired", name, evs)
		}
	}
}

// TestNotificationStreamRefusesALapsedToken: a token past its exp but
// within the verifier's leeway still verifies, yet a ticket or a stream
// bound by that exp is dead at once: a ticket every stream refuses, a
// stream that ends as it opens and is reopened every second. Both answer
// 401 saying the token expired, so the client refreshes it.
func TestNotificationStreamRefusesALapsedToken(t *testing.T) {
	s := startService(t)
	lapsed, err := signWith(testSecret, "carol", "w1", time.Now().Add(-time.Hour), time.Hour-10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Within the leeway: other requests take it.
	s.call("GET", "/api/data/notifications/unreadcount", lapsed, nil).want(t, 200)

	wantExpired := func(name string, env envelope) {
		t.Helper()
		if env.Status != 401 || env.Error == nil || env.Error.Message != "Authentication failed: token expired." {
			t.Errorf("%s: HTTP %d %s, want 401 saying the token expired", name, env.Status, env.raw)
		}
	}
	wantExpired("ticket", s.call("POST", streamPath+"/ticket", lapsed, nil))
	st, env := s.stream(lapsed, "")
	if st != nil {
		var got []string
		for _, e := range st.ended() {
			got = append(got, e.Name+" "+string(e.Data))
		}
		t.Fatalf("stream: opened with %q, want 401 saying the token expired", got)
	}
	wantExpired("stream", env)
}

// TestNotificationStreamLimits: streams per user and per instance are
// bounded (429 beyond), and an idle stream sends heartbeats.
func TestNotificationStreamLimits(t *testing.T) {
	s := startService(t, func(env map[string]string) {
		env["ASTRO_STREAMS_PER_USER"] = "2"
		env["ASTRO_STREAMS_MAX"] = "3"
		env["ASTRO_STREAM_HEARTBEAT"] = "1s"
	})
	alice, bob, carol := token(t, "alice", "w1"), token(t, "bob", "w1"), token(t, "carol", "w1")
	a1, _ := s.stream(alice, "")
	s.stream(alice, "")
	if st, env := s.stream(alice, ""); st != nil {
		t.Fatal("a third stream of alice opened")
	} else if env.want(t, 429); env.Header.Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
	s.stream(bob, "")
	if st, env := s.stream(carol, ""); st != nil {
		t.Fatal("a fourth stream on the instance opened")
	} else {
		env.want(t, 429)
	}
	// A stream that ends frees its place.
	a1.close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, env := s.stream(carol, "")
		if st != nil {
			// Idle: heartbeats.
			for e := st.nextAny(); e.Comment != "heartbeat"; e = st.nextAny() {
			}
			break
		}
		env.want(t, 429)
		if time.Now().After(deadline) {
			t.Fatal("the closed stream's place was not freed")
		}
		time.Sleep(50 * time.Millisecond) // polling the release, bounded by the deadline
	}
}

// TestNotificationStreamEndsOnShutdown: a shutdown ends streams at once
// instead of waiting out its grace period for them (stop fails the test if
// the service does not stop cleanly).
func TestNotificationStreamEndsOnShutdown(t *testing.T) {
	s := startService(t, func(env map[string]string) { env["ASTRO_SHUTDOWN_GRACE"] = "60s" })
	alice := token(t, "alice", "w1")
	st, _ := s.stream(alice, "")
	st.next()
	stopped := make(chan struct{})
	go func() { s.stop(); close(stopped) }()
	st.ended()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the service did not stop with a stream open")
	}
}

// TestAStalledStreamDoesNotHoldTheShutdown: a client that stopped reading
// (a phone gone from the network) while its inbox was busy leaves a write
// of its stream blocked on a full socket. A shutdown ends it within a
// second, not at its write's deadline (twice the heartbeat, 30 s): before,
// it held the shutdown past its grace, and the service cut every request
// off and exited 1 (stop fails the test then).
func TestAStalledStreamDoesNotHoldTheShutdown(t *testing.T) {
	s := startService(t, func(env map[string]string) { env["ASTRO_SHUTDOWN_GRACE"] = "5s" })
	alice := token(t, "alice", "w1")
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1024) })
	}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(s.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: astro\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\n\r\n", streamPath, alice)
	// More than the socket's buffers hold (the kernel's send buffer grows
	// to 4 MiB), and never read.
	svc := sender(t, "w1")
	body := sendBody("alice")
	body["message"] = strings.Repeat("m", 10000)
	for range 600 {
		s.call("POST", sendPath, svc, body).want(t, 200)
	}
	start := time.Now()
	s.stop()
	if took := time.Since(start); took > 4*time.Second {
		t.Fatalf("the stop took %v with a stalled stream", took)
	}
}

// TestNotificationStreamHeadHoldsNothing: a HEAD of the stream answers
// what a GET would, headers only, without subscribing to the hub or
// loading the inbox for a stream it never sends. Before, it did both.
func TestNotificationStreamHeadHoldsNothing(t *testing.T) {
	s := startService(t, func(env map[string]string) { env["ASTRO_STREAMS_PER_USER"] = "3" })
	alice, carol, dave := token(t, "alice", "w1"), token(t, "carol", "w1"), token(t, "dave", "w1")
	pos := s.call("POST", sendPath, sender(t, "w1"), sendBody("alice")).want(t, 200).Header.Get("X-Astro-Position")
	head := func(tok, lastEventID string) *http.Response {
		t.Helper()
		req, err := http.NewRequest("HEAD", s.base+streamPath, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		if lastEventID != "" {
			req.Header.Set("Last-Event-ID", lastEventID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if body, _ := io.ReadAll(resp.Body); len(body) != 0 {
			t.Errorf("HEAD with Last-Event-ID %q: %d bytes of content", lastEventID, len(body))
		}
		return resp
	}
	// Every load of an inbox, from memory or cold.
	loads := func() float64 {
		t.Helper()
		sc := s.scrape(s.base + "/metrics")
		return max(sc.value("astro_aggregate_cache_hits_total", "aggregate", "inbox"), 0) +
			max(sc.value("astro_aggregate_cache_misses_total", "aggregate", "inbox"), 0)
	}

	cases := []struct {
		name, tok, lastEventID string
		status                 int
	}{
		{"a new client", carol, "", 200},
		{"an empty inbox, any position", carol, sealPosition(t, api.InboxPositions, 999999), 200}, // a snapshot
		{"a resume", alice, pos, 200},
		{"a position past the log's end", alice, sealPosition(t, api.InboxPositions, 999999), 400},
		{"not a position: a snapshot", alice, "x", 200},
		{"a bare number: a snapshot", alice, "1", 200},
	}
	before := loads()
	for _, c := range cases {
		if resp := head(c.tok, c.lastEventID); resp.StatusCode != c.status {
			t.Errorf("HEAD, %s: HTTP %d, want %d", c.name, resp.StatusCode, c.status)
		} else if c.status == 200 && resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Errorf("HEAD, %s: Content-Type %q", c.name, resp.Header.Get("Content-Type"))
		}
	}
	if after := loads(); after != before {
		t.Errorf("HEADs of the stream loaded inboxes %v times", after-before)
	}
	// GET answers the same.
	for _, c := range cases {
		var headers []string
		if c.lastEventID != "" {
			headers = []string{"Last-Event-ID", c.lastEventID}
		}
		st, env := s.stream(c.tok, "", headers...)
		if st != nil {
			st.close()
		}
		if env.Status != c.status {
			t.Errorf("GET, %s: HTTP %d, want %d as HEAD", c.name, env.Status, c.status)
		}
	}
	// A HEAD is refused where a GET would be: past the user's streams.
	for range 3 {
		s.stream(dave, "")
	}
	if resp := head(dave, ""); resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("HEAD past the user's streams: HTTP %d, Retry-After %q; want 429 as GET", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}
