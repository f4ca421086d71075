//go:build faults

package faults

// The checks of the fault suite: the log against the ledger (every
// acknowledged command exactly once, nothing nobody asked for), and each
// read model against a fresh rebuild from the log.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"astro/events"
	"astro/events/natstest"
	"astro/projections"
)

// The event streams: inbox events, and the history of the rest.
const (
	inboxStream   = "ASTRO_INBOXES"
	historyStream = "ASTRO_HISTORY"
)

// readLog reads the whole event log from the NATS servers at urls.
func readLog(ctx context.Context, urls string) ([]events.Event, error) {
	nc, err := nats.Connect(urls, nats.Timeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("connect to NATS: %w", err)
	}
	defer nc.Close()
	return natstest.ReadLog(ctx, nc)
}

// projectorOf names the projector that consumes an event's subject.
func projectorOf(e events.Event) string {
	if c := projections.Consumers(e.Aggregate.Kind); len(c) > 0 {
		return c[0]
	}
	return ""
}

// verdict is what the checks found in one scenario.
type verdict struct {
	Events      int
	Lost        int // acknowledged, not in the log
	Duplicated  int // commands whose event is in the log more than once
	Unasked     int // events no command asked for
	Misreported int // answered one thing, did another
	Unexpected  int // final answers no correct service gives to this load
	GaveUp      int
	Problems    []string
	Targets     map[string]uint64 // projector → last sequence it must reach
}

func (v *verdict) problem(format string, args ...any) {
	v.Problems = append(v.Problems, fmt.Sprintf(format, args...))
}

// checkLog holds the log to the ledger. With compacted, the inboxes' logs
// were compacted: a send's event may be gone (its notification restated by
// an InboxCompacted, or deleted and erased), so an acknowledged send or
// delete missing from the log is no loss here (checkPending judges the
// inboxes instead); the history is never compacted and is held as always.
func checkLog(ws string, log []events.Event, cmds []*command, compacted bool) *verdict {
	v := &verdict{Events: len(log), Targets: map[string]uint64{}}
	for _, name := range projections.Names() {
		v.Targets[name] = 0
	}
	byMarker := map[string]*command{}
	deletesOf := map[string][]*command{} // notification id → delete commands
	sentOf := map[string]map[string]int{}
	count := func(kind, key string) int { return sentOf[kind][key] }
	for _, c := range cmds {
		if c.Marker != "" {
			byMarker[c.Marker] = c
		}
		if c.Kind == kDelete {
			deletesOf[c.Target] = append(deletesOf[c.Target], c)
		}
		if sentOf[c.Kind] == nil {
			sentOf[c.Kind] = map[string]int{}
		}
		sentOf[c.Kind][c.User+"/"+c.Target]++
	}

	type hit struct {
		e  events.Event
		id string // the aggregate or notification id the event names
	}
	markers := map[string][]hit{}
	userDeletes := map[string][]events.Event{}
	perKey := map[string]int{} // type/user/target → events
	for _, e := range log {
		if p := projectorOf(e); p != "" {
			v.Targets[p] = e.Seq
		}
		if e.WorkspaceID != ws {
			v.Unasked++
			v.problem("unasked: event %s (seq %d) of workspace %q", e.Type, e.Seq, e.WorkspaceID)
			continue
		}
		p, err := events.Decode(e)
		if err != nil {
			v.Unasked++
			v.problem("unasked: undecodable event at seq %d: %v", e.Seq, err)
			continue
		}
		marker, kinds, id := "", []string(nil), ""
		switch p := p.(type) {
		case *events.InboxCompacted:
			if !compacted {
				v.Unasked++
				v.problem("unasked: %s at seq %d, with compaction off", e.Type, e.Seq)
				continue
			}
			// The notifications it restates each came from a send.
			for _, n := range p.Notifications {
				m, _ := strings.CutPrefix(n.Subject, "load ")
				c := byMarker[m]
				if c == nil || (c.Kind != kSend && c.Kind != kProbe) {
					v.Unasked++
					v.problem("unasked: compaction at seq %d restates %s with marker %q, which no send sent", e.Seq, n.NotificationID, m)
					continue
				}
				if c.Target != p.RecipientID {
					v.Unasked++
					v.problem("unasked: compaction at seq %d restates send %s in the inbox of %s, the command asked for %s", e.Seq, m, p.RecipientID, c.Target)
				}
				// The same notification restated again, or still in
				// the log beside its restatement, is one hit.
				if !slices.ContainsFunc(markers[m], func(h hit) bool { return h.id == n.NotificationID }) {
					markers[m] = append(markers[m], hit{e, n.NotificationID})
				}
			}
			continue
		case *events.NotificationSent:
			marker, _ = strings.CutPrefix(p.Subject, "load ")
			kinds, id = []string{kSend, kProbe}, p.NotificationID
			if compacted && slices.ContainsFunc(markers[marker], func(h hit) bool { return h.id == id }) {
				continue // restated by a compaction the erasure has not reached yet
			}
			if c := byMarker[marker]; c != nil && c.Target != p.RecipientID {
				v.Unasked++
				v.problem("unasked: send %s went to %s, the command asked for %s (seq %d)", marker, p.RecipientID, c.Target, e.Seq)
			}
		case *events.HolidayCreated:
			marker, _ = strings.CutPrefix(p.Reason, "hol ")
			kinds, id = []string{kHoliday}, p.HolidayID
		case *events.HolidayRenamed:
			marker, _ = strings.CutPrefix(p.NewReason, "ren ")
			kinds, id = []string{kRename}, p.HolidayID
			if c := byMarker[marker]; c != nil && !strings.EqualFold(c.Target, p.HolidayID) {
				v.Unasked++
				v.problem("unasked: rename %s applied to holiday %s, the command named %s (seq %d)", marker, p.HolidayID, c.Target, e.Seq)
			}
		case *events.ResourceUpserted:
			marker, _ = strings.CutPrefix(p.Name, "res ")
			kinds, id = []string{kResource}, p.ResourceID
			if c := byMarker[marker]; c != nil && c.Target != p.ResourceID {
				v.Unasked++
				v.problem("unasked: resource upsert %s applied to %s, the command named %s (seq %d)", marker, p.ResourceID, c.Target, e.Seq)
			}
		case *events.NotificationDeleted:
			switch p.Reason {
			case events.ReasonUser:
				userDeletes[p.NotificationID] = append(userDeletes[p.NotificationID], e)
				if len(deletesOf[p.NotificationID]) == 0 {
					v.Unasked++
					v.problem("unasked: NotificationDeleted of %s for %s at seq %d: no delete was sent for it", p.NotificationID, p.RecipientID, e.Seq)
				}
			case events.ReasonOverflow:
				// A consequence of a send to a full inbox: asked for.
			default:
				v.Unasked++
				v.problem("unasked: NotificationDeleted with reason %q at seq %d", p.Reason, e.Seq)
			}
			continue
		case *events.NotificationRead:
			perKey[kMarkRead+"/"+p.RecipientID+"/"+p.NotificationID]++
			continue
		case *events.NotificationUnread:
			perKey[kMarkUnread+"/"+p.RecipientID+"/"+p.NotificationID]++
			continue
		case *events.AllNotificationsRead:
			perKey[kMarkAll+"/"+p.RecipientID+"/"+p.RecipientID]++
			continue
		case *events.AllNotificationsDeleted:
			perKey[kDeleteAll+"/"+p.RecipientID+"/"+p.RecipientID]++
			continue
		default:
			v.Unasked++
			v.problem("unasked: event type %s at seq %d", e.Type, e.Seq)
			continue
		}
		c := byMarker[marker]
		if c == nil || !slices.Contains(kinds, c.Kind) {
			v.Unasked++
			v.problem("unasked: %s at seq %d carries marker %q, which no %v command sent", e.Type, e.Seq, marker, kinds)
			continue
		}
		markers[marker] = append(markers[marker], hit{e, id})
	}
	// Commands that may each cause at most one event: no more events than
	// commands sent.
	for key, n := range perKey {
		kind, rest, _ := strings.Cut(key, "/")
		if sent := count(kind, rest); n > sent {
			v.Unasked += n - sent
			v.problem("unasked: %d %s events for %s, %d such commands sent", n, kind, rest, sent)
		}
	}

	for _, c := range cmds {
		if c.Outcome == cmdGaveUp {
			v.GaveUp++
			inLog := ""
			if c.Marker != "" {
				inLog = "; its event is NOT in the log"
				if hits := markers[c.Marker]; len(hits) > 0 {
					inLog = fmt.Sprintf("; its event IS in the log (seq %d, event id %s)", hits[0].e.Seq, hits[0].e.ID)
				}
			}
			v.problem("gave up: %s #%d (%s %s, key %s) after %d attempts over %v (%d without an answer, %d answered 409 in progress, %d replayed answers)%s; last: HTTP %d %s",
				c.Kind, c.N, c.Method, c.Path, c.Key, c.Attempts, c.End.Sub(c.Start).Round(time.Millisecond), c.Transport, c.InProgress, c.Replayed, inLog, c.Status, c.Answer)
		}
		if c.Outcome == cmdRejected && !(c.Status == 404 && slices.Contains([]string{kDelete, kMarkRead, kMarkUnread}, c.Kind)) {
			v.Unexpected++
			v.problem("unexpected answer: %s #%d (%s %s, key %s) answered HTTP %d after %d attempts: %s",
				c.Kind, c.N, c.Method, c.Path, c.Key, c.Status, c.Attempts, c.Answer)
		}
		switch {
		case c.Marker != "":
			hits := markers[c.Marker]
			if len(hits) > 1 {
				v.Duplicated++
				seqs := make([]string, len(hits))
				for i, h := range hits {
					seqs[i] = fmt.Sprintf("seq %d id %s event %s", h.e.Seq, h.id, h.e.ID)
				}
				v.problem("duplicated: %s #%d (%s, %d attempts, key %s) is in the log %d times: %s",
					c.Kind, c.N, c.Outcome, c.Attempts, c.Key, len(hits), strings.Join(seqs, "; "))
			}
			switch {
			case c.Outcome == cmdAcked && len(hits) == 0 && compacted && (c.Kind == kSend || c.Kind == kProbe):
				// Sent, then deleted and erased by a compaction: checkPending
				// tells deleted from lost.
			case c.Outcome == cmdAcked && len(hits) == 0:
				v.Lost++
				v.problem("lost: %s #%d (%s %s, key %s) was acknowledged (HTTP %d after %d attempts) but is not in the log",
					c.Kind, c.N, c.Method, c.Path, c.Key, c.Status, c.Attempts)
			case c.Outcome == cmdAcked && (c.Kind == kSend || c.Kind == kProbe || c.Kind == kHoliday) && hits[0].id != c.RespID:
				v.Misreported++
				v.problem("misreported: %s #%d answered id %q, the log has %q (seq %d)", c.Kind, c.N, c.RespID, hits[0].id, hits[0].e.Seq)
			case c.Outcome == cmdRejected && len(hits) > 0:
				v.Misreported++
				v.problem("misreported: %s #%d (key %s) answered HTTP %d (%s) but is in the log at seq %d",
					c.Kind, c.N, c.Key, c.Status, c.Answer, hits[0].e.Seq)
			}
		case c.Kind == kDelete:
			evs := userDeletes[c.Target]
			if c.Outcome == cmdAcked && len(evs) == 0 && !compacted {
				v.Lost++
				v.problem("lost: delete #%d of %s was acknowledged but no NotificationDeleted is in the log", c.N, c.Target)
			}
		}
	}
	for id, evs := range userDeletes {
		if n := len(deletesOf[id]); len(evs) > 1 {
			v.Duplicated++
			v.problem("duplicated: notification %s deleted %d times by its user (%d delete commands sent)", id, len(evs), n)
		}
	}
	return v
}

// readModelTables are the tables the projectors own, with their keys.
var readModelTables = []struct{ name, order string }{
	{"notifications", "workspace_id, recipient_id, id"},
	{"notification_counts", "workspace_id, recipient_id"}, // behind unreadcount, count and the badge
	{"holidays", "workspace_id, id"},
	{"resources", "workspace_id, id"},
}

// dumpReadModels returns every row of every read-model table as JSON.
func dumpReadModels(ctx context.Context, url string) (map[string][]string, error) {
	db, err := sqlx.Open("postgres", url)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	out := map[string][]string{}
	for _, tb := range readModelTables {
		var rows []string
		if err := db.SelectContext(ctx, &rows, `SELECT row_to_json(t)::text FROM `+tb.name+` t ORDER BY `+tb.order); err != nil {
			return nil, fmt.Errorf("dump %s: %w", tb.name, err)
		}
		out[tb.name] = rows
	}
	return out, nil
}

// compareReadModels describes how got (the service's) differs from want
// (the rebuild's); "" when equal.
func compareReadModels(got, want map[string][]string) (string, []string) {
	var summary, details []string
	for _, tb := range readModelTables {
		g, w := got[tb.name], want[tb.name]
		if slices.Equal(g, w) {
			continue
		}
		inG, inW := map[string]bool{}, map[string]bool{}
		for _, r := range g {
			inG[r] = true
		}
		for _, r := range w {
			inW[r] = true
		}
		var onlyG, onlyW []string
		for _, r := range g {
			if !inW[r] {
				onlyG = append(onlyG, r)
			}
		}
		for _, r := range w {
			if !inG[r] {
				onlyW = append(onlyW, r)
			}
		}
		summary = append(summary, fmt.Sprintf("%s: %d rows vs %d rebuilt, %d only in service, %d only in rebuild", tb.name, len(g), len(w), len(onlyG), len(onlyW)))
		for _, r := range onlyG[:min(5, len(onlyG))] {
			details = append(details, "read model: only in service "+tb.name+": "+r)
		}
		for _, r := range onlyW[:min(5, len(onlyW))] {
			details = append(details, "read model: only in rebuild "+tb.name+": "+r)
		}
	}
	return strings.Join(summary, "; "), details
}

// checkpoints reads the projectors' checkpoints of a database.
func checkpoints(ctx context.Context, url string) (map[string]uint64, error) {
	db, err := sqlx.Open("postgres", url)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var rows []struct {
		Name string `db:"name"`
		Seq  uint64 `db:"seq"`
	}
	if err := db.SelectContext(ctx, &rows, `SELECT name, seq FROM projector_checkpoints`); err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, r := range rows {
		out[r.Name] = r.Seq
	}
	return out, nil
}

// waitCheckpoints waits until every projector of url reached its target.
func waitCheckpoints(ctx context.Context, url string, targets map[string]uint64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var got map[string]uint64
	var err error
	for {
		got, err = checkpoints(ctx, url)
		if err == nil {
			done := true
			for name, seq := range targets {
				if got[name] < seq {
					done = false
				}
			}
			if done {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("projectors did not reach %v within %v: checkpoints %v (err %v)", targets, timeout, got, err)
		}
		time.Sleep(50 * time.Millisecond) // polling checkpoints, bounded by the deadline
	}
}

// rebuild runs the projectors over the whole log into the empty database
// at url, until each reached its target. The service must be stopped: the
// runners use the projectors' durable consumers.
func rebuild(ctx context.Context, urls, url string, targets map[string]uint64, logw io.Writer) error {
	nc, err := nats.Connect(urls, nats.Timeout(5*time.Second))
	if err != nil {
		return fmt.Errorf("connect to NATS: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	db, err := sqlx.Open("postgres", url)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := projections.Migrate(ctx, db); err != nil {
		return err
	}
	projectors, err := projections.NewAll(ctx, db)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var runners []*projections.Runner
	done := make(chan error, len(projectors))
	for i, p := range projectors {
		stream := historyStream
		if slices.Contains(projections.Registered()[i].Kinds, events.KindInbox) {
			stream = inboxStream
		}
		r, err := projections.NewRunner(js, db, p, projections.RunnerConfig{Stream: stream,
			Logger: slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		if err != nil {
			return err
		}
		runners = append(runners, r)
		go func() { done <- r.Run(ctx) }()
	}
	waitCtx, waitCancel := context.WithTimeout(ctx, 90*time.Second)
	defer waitCancel()
	for _, r := range runners {
		if err := r.WaitFor(waitCtx, targets[r.Name()]); err != nil {
			return fmt.Errorf("rebuild: %w", err)
		}
	}
	cancel()
	for range runners {
		if err := <-done; err != nil {
			return fmt.Errorf("rebuild runner: %w", err)
		}
	}
	return nil
}

// maxPending is the inbox cap (commands/notifications.MaxPending).
const maxPending = 1000

// checkInvariants replays the log per aggregate and reports every event
// that the aggregate, in the state the log gives it, could not have
// decided: an event decided on a wrong (stale or doubled) in-memory state
// is in the log but was not what the command asked for.
func checkInvariants(log []events.Event) []string {
	var bad []string
	report := func(e events.Event, format string, args ...any) {
		bad = append(bad, fmt.Sprintf("inconsistent: seq %d %s on %s: ", e.Seq, e.Type, events.Subject(e.WorkspaceID, e.Aggregate))+fmt.Sprintf(format, args...))
	}
	type inbox struct {
		order   []string        // pending ids, oldest first
		read    map[string]bool // pending id → read
		everyID map[string]uint64
		over    bool // over the cap: the next event must make room
		known   bool // the log holds events of it before the current one
		trusted bool // the current compaction restates a known state
	}
	inboxes := map[string]*inbox{}
	type holiday struct {
		created bool
		reason  string
	}
	holidays := map[string]*holiday{}
	resources := map[string]*events.ResourceUpserted{}

	remove := func(in *inbox, id string) {
		delete(in.read, id)
		in.order = slices.DeleteFunc(in.order, func(x string) bool { return x == id })
	}
	for _, e := range log {
		p, err := events.Decode(e)
		if err != nil {
			continue // reported by checkLog
		}
		key := events.Subject(e.WorkspaceID, e.Aggregate)
		switch e.Aggregate.Kind {
		case events.KindInbox:
			in := inboxes[key]
			if in == nil {
				in = &inbox{read: map[string]bool{}, everyID: map[string]uint64{}}
				inboxes[key] = in
			}
			wasOver := in.over
			switch p := p.(type) {
			case *events.InboxCompacted:
				// A compaction restates the inbox: when the log still
				// holds what came before it (its erasure not done yet), it
				// must restate exactly that state.
				if p.Part == 1 {
					in.trusted = in.known
					if in.known && !slices.Equal(in.order, p.NotificationIDs) {
						report(e, "restates %d pending, the inbox has %d: %s (or another order)", len(p.NotificationIDs), len(in.order), setDiff(in.order, p.NotificationIDs))
					}
					read := in.read
					in.order, in.read = slices.Clone(p.NotificationIDs), map[string]bool{}
					for _, id := range in.order {
						in.read[id] = read[id]
						if _, ok := in.everyID[id]; !ok {
							in.everyID[id] = e.Seq
						}
					}
				}
				for _, n := range p.Notifications {
					r, ok := in.read[n.NotificationID]
					switch {
					case !ok:
						report(e, "part %d carries %s, which part 1 does not list", p.Part, n.NotificationID)
					case in.trusted && r != (n.ReadDate != nil):
						report(e, "restates %s as read %v, it was read %v", n.NotificationID, n.ReadDate != nil, r)
					}
					if ok {
						in.read[n.NotificationID] = n.ReadDate != nil
					}
				}
			case *events.NotificationSent:
				if seq, ok := in.everyID[p.NotificationID]; ok {
					report(e, "notification %s was already sent at seq %d", p.NotificationID, seq)
					break
				}
				in.everyID[p.NotificationID] = e.Seq
				in.order = append(in.order, p.NotificationID)
				in.read[p.NotificationID] = false
			case *events.NotificationDeleted:
				if _, ok := in.read[p.NotificationID]; !ok {
					report(e, "notification %s (%s) is not pending", p.NotificationID, p.Reason)
					break
				}
				if p.Reason == events.ReasonOverflow {
					if len(in.order) < maxPending {
						report(e, "overflow delete with %d pending, the cap is %d", len(in.order), maxPending)
					}
					if in.order[0] != p.NotificationID {
						report(e, "overflow deleted %s, the oldest pending is %s", p.NotificationID, in.order[0])
					}
				}
				remove(in, p.NotificationID)
			case *events.NotificationRead:
				if r, ok := in.read[p.NotificationID]; !ok || r {
					report(e, "notification %s is not pending and unread (pending %v, read %v)", p.NotificationID, ok, r)
				}
				in.read[p.NotificationID] = true
			case *events.NotificationUnread:
				if r, ok := in.read[p.NotificationID]; !ok || !r {
					report(e, "notification %s is not pending and read (pending %v, read %v)", p.NotificationID, ok, r)
				}
				in.read[p.NotificationID] = false
			case *events.AllNotificationsRead:
				var unread []string
				for _, id := range in.order {
					if !in.read[id] {
						unread = append(unread, id)
					}
				}
				if !sameSet(unread, p.NotificationIDs) {
					report(e, "lists %d ids (%d distinct), the inbox has %d unread: %s", len(p.NotificationIDs), len(distinct(p.NotificationIDs)), len(unread), setDiff(unread, p.NotificationIDs))
				}
				for _, id := range p.NotificationIDs {
					if _, ok := in.read[id]; ok {
						in.read[id] = true
					}
				}
			case *events.AllNotificationsDeleted:
				if !sameSet(in.order, p.NotificationIDs) {
					report(e, "lists %d ids (%d distinct), the inbox has %d pending: %s", len(p.NotificationIDs), len(distinct(p.NotificationIDs)), len(in.order), setDiff(in.order, p.NotificationIDs))
				}
				for _, id := range p.NotificationIDs {
					remove(in, id)
				}
			}
			in.known = true
			if wasOver && len(in.order) > maxPending {
				report(e, "the inbox stays over the cap: %d pending", len(in.order))
			}
			in.over = len(in.order) > maxPending
		case events.KindHoliday:
			h := holidays[key]
			if h == nil {
				h = &holiday{}
				holidays[key] = h
			}
			switch p := p.(type) {
			case *events.HolidayCreated:
				if h.created {
					report(e, "holiday created twice")
				}
				h.created, h.reason = true, p.Reason
			case *events.HolidayRenamed:
				if !h.created {
					report(e, "rename of a holiday not created")
				}
				if p.OldReason != h.reason {
					report(e, "oldReason %q, the holiday's reason was %q: decided on a stale state", p.OldReason, h.reason)
				}
				if p.NewReason == h.reason {
					report(e, "rename to the current reason %q: a no-op appended", p.NewReason)
				}
				h.reason = p.NewReason
			}
		case events.KindResource:
			if p, ok := p.(*events.ResourceUpserted); ok {
				if old := resources[key]; old != nil && *old == *p {
					report(e, "upsert equal to the current resource: a no-op appended")
				}
				resources[key] = p
			}
		}
	}
	return bad
}

func distinct(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// sameSet reports whether got lists exactly the ids of want, each once.
func sameSet(want, got []string) bool {
	d := distinct(got)
	if len(d) != len(got) || len(got) != len(want) {
		return false
	}
	for _, id := range want {
		if !d[id] {
			return false
		}
	}
	return true
}

// setDiff describes how got differs from want.
func setDiff(want, got []string) string {
	w, g := distinct(want), distinct(got)
	var missing, extra []string
	for id := range w {
		if !g[id] {
			missing = append(missing, id)
		}
	}
	for id := range g {
		if !w[id] {
			extra = append(extra, id)
		}
	}
	return fmt.Sprintf("missing %d %v, extra %d %v, repeated %d", len(missing), missing[:min(3, len(missing))], len(extra), extra[:min(3, len(extra))], len(got)-len(g))
}
