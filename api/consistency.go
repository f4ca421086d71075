package api

import (
	"context"
	"net/http"

	"astro/commands"
	"astro/events"
)

// Consistency tokens. Every write answers with the log position of what it
// did (HeaderPosition), sealed (PositionSeal). A read needs no token: it asks the log for the last
// position of the aggregates it shows and waits until the read model has
// applied it, so it reflects every write answered before it began, the
// caller's or anyone's, on any instance. A client may still send a
// position back (HeaderMinPosition) to read at least at it, as clients of
// event-sourced APIs expect; it is always met, and checked.
const (
	HeaderPosition    = "X-Astro-Position"
	HeaderMinPosition = "X-Astro-Min-Position"
)

// Positions tells where the log is.
type Positions interface {
	// LastSeq is the sequence of the last event on subject (wildcards
	// allowed), 0 when there is none.
	LastSeq(ctx context.Context, subject string) (uint64, error)
	// End is the sequence of the last event of the stream that keeps
	// kind's events.
	End(ctx context.Context, kind string) (uint64, error)
	// Settled is the last position this instance's appends of kind's
	// events got, and whether none is under way.
	Settled(kind string) (last uint64, ok bool)
	// After reports whether the stream of kind's events holds an event
	// after position seq.
	After(ctx context.Context, kind string, seq uint64) (bool, error)
}

// lastSeq is the log position of the newest event on any of subjects.
func (s *Server) lastSeq(r *http.Request, subjects ...string) (uint64, error) {
	var last uint64
	for _, subj := range subjects {
		seq, err := s.cfg.Log.LastSeq(r.Context(), subj)
		if err != nil {
			return 0, unavailable(err)
		}
		last = max(last, seq)
	}
	return last, nil
}

// await waits, bounded, until read model m has applied log position pos,
// the last event of what the read shows. Past the bound it answers 503
// with Retry-After: the read model is behind, and a moment will do.
//
// A position the client asks for needs no wait of its own: every event
// that changes what the read shows is at or before pos, so the read model
// at pos shows that data as it is at any later position. It is checked,
// though: a position the log has not reached cannot come from a write.
func (s *Server) await(w http.ResponseWriter, r *http.Request, m Waiter, pos uint64) error {
	// A position at or before pos needs no check: pos is one the log has.
	// (Sealed, a position came from a write anyway; the check stops one
	// past the log's end, after a restore of the log.)
	if min, ok := minPosition(r); ok && min.seq > pos {
		if err := s.checkMinPosition(r); err != nil {
			return err
		}
	}
	if pos == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ReadYourWrites)
	defer cancel()
	if err := m.WaitFor(ctx, pos); err != nil {
		w.Header().Set("Retry-After", "1")
		return &commands.Error{Code: commands.EUnavailable, Message: "The data is still being updated; try again in a moment.", Err: err}
	}
	return nil
}

// checkMinPosition refuses a position the client asked for that its
// stream has not reached: it cannot come from a write. Reads of the log
// itself (a holiday's history, ?asOf=), which need no wait, check it as
// every other read does, so that no read takes what the others refuse.
func (s *Server) checkMinPosition(r *http.Request) error {
	min, ok := minPosition(r)
	if !ok {
		return nil
	}
	kinds := []string{min.stream.kind()}
	if min.stream == anyPositions { // an older seal's: either stream's
		kinds = []string{events.KindInbox, events.KindHoliday}
	}
	var last uint64
	for _, kind := range kinds {
		end, err := s.cfg.Log.End(r.Context(), kind)
		if err != nil {
			return unavailable(err)
		}
		last = max(last, end)
	}
	if min.seq > last {
		return commands.Invalid(map[string][]string{HeaderMinPosition: {"The log has no such position yet."}})
	}
	return nil
}

// fresh makes read model m reflect every event on subjects (and the
// position the client asked for) before a read.
func (s *Server) fresh(w http.ResponseWriter, r *http.Request, m Waiter, subjects ...string) error {
	pos, err := s.lastSeq(r, subjects...)
	if err != nil {
		return err
	}
	return s.await(w, r, m, pos)
}

func unavailable(err error) error {
	return &commands.Error{Code: commands.EUnavailable, Message: "The service is temporarily unavailable; try again.", Err: err}
}

func inboxSubject(c commands.Caller) string {
	return events.Subject(c.WorkspaceID, events.Aggregate{Kind: events.KindInbox, ID: c.UserID})
}

// workspaceSubjects are the subjects of every aggregate of kind in the
// caller's workspace.
func workspaceSubjects(c commands.Caller, kind string) string {
	return events.Subject(c.WorkspaceID, events.Aggregate{Kind: kind, ID: "*"})
}

// workspaceSubject is the caller's workspace's own subject, which holds its
// erasure: an erasure removes every holiday and resource event, so their
// subjects no longer tell a read what it must wait for.
func workspaceSubject(c commands.Caller) string {
	return events.Subject(c.WorkspaceID, events.Aggregate{Kind: events.KindWorkspace, ID: c.WorkspaceID})
}
