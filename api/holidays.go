package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	"astro/commands"
	"astro/commands/holidays"
	"astro/events"
	"astro/query"
	"astro/query/history"
)

// createHolidayRequest is the body of POST /api/data/holidays.
type createHolidayRequest struct {
	Reason    *string  `json:"reason"`
	Type      string   `json:"type"`
	DateFrom  string   `json:"dateFrom"`
	DateTo    string   `json:"dateTo"`
	CountryID flexList `json:"countryId"`
	Resources flexList `json:"resources"`
}

// HolidayUpdateDto is spec 2.5.
type HolidayUpdateDto struct {
	Reason *string `json:"reason"`
}

// ResourceDto is a resource as upstream services send it and get it back.
type ResourceDto struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	CountryCode string `json:"countryCode"`
	IsActive    bool   `json:"isActive"`
	IsGuest     bool   `json:"isGuest"`
}

// flexList accepts what clients send for a list of ids: a list of strings,
// a single string, or a list of {"id": ...} objects (the shape of
// HolidayResourceDto).
type flexList []string

func (l *flexList) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		*l = nil
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*l = flexList{s}
		return nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(b, &items); err != nil {
		return err
	}
	out := make(flexList, 0, len(items))
	for _, it := range items {
		var s string
		if err := json.Unmarshal(it, &s); err != nil {
			var obj struct{ ID string }
			if err := json.Unmarshal(it, &obj); err != nil {
				// The decoder names the field of a type error: the
				// client's answer is validationErrors[field].
				return &json.UnmarshalTypeError{Value: "list item", Type: reflect.TypeFor[string]()}
			}
			s = obj.ID
		}
		out = append(out, s)
	}
	*l = out
	return nil
}

func (s *Server) holidayRoutes() {
	const base = "/api/data/holidays"
	rt := s.router
	rt.POST(base, s.authed(s.createHoliday))
	rt.named(http.MethodGet, base+"/:id", "id", []string{"global", "country", "resource"}, s.authed(func(w http.ResponseWriter, r *http.Request, p httprouter.Params, c commands.Caller) error {
		q := r.URL.Query()
		if err := singleValued(q, "$filter", "$orderby", "$top", "$skip", "asOf"); err != nil {
			return err
		}
		opts := query.ListOptions{Filter: q.Get("$filter"), OrderBy: q.Get("$orderby"), Top: q.Get("$top"), Skip: q.Get("$skip")}
		id := p.ByName("id")
		if id != "global" && id != "country" && id != "resource" {
			data, err := s.getHoliday(w, r, c, id)
			if err != nil {
				return err
			}
			writeOK(w, data)
			return nil
		}
		// The lists show every holiday of the workspace, and resources,
		// and none once the workspace is erased.
		if err := s.fresh(w, r, s.cfg.HolidaysProjected, workspaceSubjects(c, events.KindHoliday), workspaceSubjects(c, events.KindResource), workspaceSubject(c)); err != nil {
			return err
		}
		var data any
		var err error
		switch id {
		case "global":
			data, err = s.cfg.HolidayQueries.Global(r.Context(), c.WorkspaceID, opts)
		case "country":
			data, err = s.cfg.HolidayQueries.Country(r.Context(), c.WorkspaceID, opts)
		case "resource":
			data, err = s.cfg.HolidayQueries.Resource(r.Context(), c.WorkspaceID, opts)
		}
		if err != nil {
			return err
		}
		writeOK(w, data)
		return nil
	}))
	rt.GET(base+"/:id/:what", s.authed(func(w http.ResponseWriter, r *http.Request, p httprouter.Params, c commands.Caller) error {
		if p.ByName("what") != "history" {
			return notFoundRoute(r)
		}
		after, limit, err := s.historyPage(r.URL.Query(), c)
		if err != nil {
			return err
		}
		if err := s.checkMinPosition(r); err != nil {
			return err
		}
		h, err := s.cfg.HolidayHistory.History(r.Context(), c.WorkspaceID, p.ByName("id"), after, limit)
		if err != nil {
			return err
		}
		page := make([]HolidayHistoryEntryDto, len(h))
		for i, e := range h {
			page[i] = HolidayHistoryEntryDto{HolidayEvent: e, Sequence: s.seal.Seal(c.WorkspaceID, HistoryPositions, e.Sequence)}
		}
		writeOK(w, page)
		return nil
	}))
	rt.PUT(base+"/:id", s.authed(s.renameHoliday))
	rt.PUT("/api/data/resources/:id", s.authed(s.upsertResource))
}

func (s *Server) getHoliday(w http.ResponseWriter, r *http.Request, c commands.Caller, id string) (any, error) {
	if !events.ValidUUID(id) {
		return nil, commands.Invalid(map[string][]string{"id": {"The id must be a UUID."}})
	}
	if asOf := r.URL.Query().Get("asOf"); asOf != "" {
		at, ok := parseDateTime(asOf)
		if !ok {
			return nil, commands.Invalid(map[string][]string{"asOf": {"asOf must be an RFC 3339 time, e.g. 2027-01-01T12:00:00Z."}})
		}
		if err := s.checkMinPosition(r); err != nil {
			return nil, err
		}
		return s.cfg.HolidayHistory.AsOf(r.Context(), c.WorkspaceID, id, at)
	}
	holiday := events.Subject(c.WorkspaceID, events.Aggregate{Kind: events.KindHoliday, ID: id})
	if err := s.fresh(w, r, s.cfg.HolidaysProjected, holiday, workspaceSubjects(c, events.KindResource), workspaceSubject(c)); err != nil {
		return nil, err
	}
	return s.cfg.HolidayQueries.Get(r.Context(), c.WorkspaceID, id)
}

func (s *Server) createHoliday(w http.ResponseWriter, r *http.Request, _ httprouter.Params, c commands.Caller) error {
	var req createHolidayRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	// The workspace's holiday budget is counted in the read model: it
	// must hold every holiday created before this one. Creates of one
	// workspace that ran at once would each count without the others, and
	// pass the budget together: on one instance they run one at a time,
	// and across instances a create is appended only while the workspace's
	// last holiday event is the one the count was made at (BudgetAt).
	release, ok := s.creates.acquire(r.Context(), c.WorkspaceID)
	if !ok {
		w.Header().Set("Retry-After", "1")
		return commands.Errorf(commands.ETooManyRequests, "Too many holidays of this workspace being created at once; retry after 1 s.")
	}
	defer release()
	// A resource is named as its upsert names it, so "res-000" here is
	// the resource PUT at /api/data/resources/res-000.
	resources := make([]string, len(req.Resources))
	for i, r := range req.Resources {
		resources[i] = events.UpstreamID(r)
	}
	for attempt := 1; ; attempt++ {
		at, err := s.lastSeq(r, workspaceSubjects(c, events.KindHoliday))
		if err != nil {
			return err
		}
		// The workspace's own subject too: after its erasure the holiday
		// subjects are empty, and the budget must not count what it erased.
		erased, err := s.lastSeq(r, workspaceSubject(c))
		if err != nil {
			return err
		}
		if err := s.await(w, r, s.cfg.HolidaysProjected, max(at, erased)); err != nil {
			return err
		}
		scope, err := s.scopeAfter(w, r, c, erased)
		if err != nil {
			return err
		}
		id, h, res, err := s.cfg.Holidays.Create.Handle(r.Context(), holidays.Create{
			Caller: c, Reason: req.Reason, Type: req.Type, DateFrom: req.DateFrom, DateTo: req.DateTo,
			CountryIDs: req.CountryID, ResourceIDs: resources, BudgetAt: at,
		})
		switch {
		case errors.Is(err, events.ErrLogMoved) && attempt < 8:
			// Another instance changed the workspace's holidays (a create,
			// or a rename, which moves them too): count again, after a
			// pause that grows, so that a run of renames does not meet
			// every attempt.
			pause := time.Duration(attempt)*5*time.Millisecond + rand.N(5*time.Millisecond)
			select {
			case <-r.Context().Done():
				return r.Context().Err()
			case <-time.After(pause):
			}
			continue
		case errors.Is(err, events.ErrLogMoved):
			return &commands.Error{Code: commands.EConflict, Message: "The workspace's holidays are being changed by someone else; try again.", Err: err}
		case err != nil:
			return err
		}
		s.setPosition(w, c, HistoryPositions, res.Seq)
		writeOK(w, holidayDetail(id, h, scope))
		return nil
	}
}

func (s *Server) renameHoliday(w http.ResponseWriter, r *http.Request, p httprouter.Params, c commands.Caller) error {
	id := p.ByName("id")
	if !events.ValidUUID(id) {
		return commands.Invalid(map[string][]string{"id": {"The id must be a UUID."}})
	}
	var req HolidayUpdateDto
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	if scope, at, ok := s.seenScope(r, c); ok {
		h, res, err := s.cfg.Holidays.Rename.Handle(r.Context(), holidays.Rename{Caller: c, HolidayID: id, Reason: req.Reason, LogAt: at})
		switch {
		case errors.Is(err, events.ErrLogMoved):
		case err != nil:
			return err
		case len(res.Events) > 0: // appended where the stream was at
			s.setPosition(w, c, HistoryPositions, res.Seq)
			writeOK(w, holidayDetail(id, h, scope))
			return nil
		}
		// Something came first that this instance has not seen, or the
		// rename appended nothing and so checked no position: the long way.
	}
	scope, err := s.scope(w, r, c)
	if err != nil {
		return err
	}
	h, res, err := s.cfg.Holidays.Rename.Handle(r.Context(), holidays.Rename{Caller: c, HolidayID: id, Reason: req.Reason})
	if err != nil {
		return err
	}
	s.setPosition(w, c, HistoryPositions, res.Seq)
	writeOK(w, holidayDetail(id, h, scope))
	return nil
}

// seenScope is the caller's workspace's resources as this instance has
// seen them go past in the history stream, and the position it has seen
// the stream up to, when a write can answer with them by appending at that
// position (commands.RunAt): the log then refuses the write if anything
// came after, and the write goes the long way (scope). It skips the
// log's position read, one round trip of the two of a rename. Not when
// this instance's own appends are under way or not seen yet (the log
// would refuse), on a retried request, or with a position to check.
func (s *Server) seenScope(r *http.Request, c commands.Caller) (query.Scope, uint64, bool) {
	if c.Again || r.Header.Get(HeaderMinPosition) != "" {
		return query.Scope{}, 0, false
	}
	last, settled := s.cfg.Log.Settled(events.KindHoliday)
	if !settled {
		return query.Scope{}, 0, false
	}
	return s.cfg.Resources.Current(c.WorkspaceID, last)
}

// scope is the caller's workspace's resources as the answer of a holiday
// write shows them. It is read before the write, so that an unreachable
// database fails the request before anything is appended, never after;
// usually memory has it as of the workspace's last resource event.
func (s *Server) scope(w http.ResponseWriter, r *http.Request, c commands.Caller) (query.Scope, error) {
	// The workspace's erasure too: it takes every resource, and its
	// removal of their events comes after its own event (long after, when
	// cut short at its deadline), so until then the resources' last event
	// is one from before it, and the scope remembered there is wrong.
	// (Resource events after an erasure come after it in the log.)
	erased, err := s.lastSeq(r, workspaceSubject(c))
	if err != nil {
		return query.Scope{}, err
	}
	return s.scopeAfter(w, r, c, erased)
}

// scopeAfter is scope for a caller that has just read erased, the last
// position of the workspace's own subject (its erasures), itself.
func (s *Server) scopeAfter(w http.ResponseWriter, r *http.Request, c commands.Caller, erased uint64) (query.Scope, error) {
	mark := s.cfg.Resources.Mark()
	at, err := s.lastSeq(r, workspaceSubjects(c, events.KindResource))
	if err != nil {
		return query.Scope{}, err
	}
	if erased < at || erased == 0 {
		if sc, ok := s.cfg.Resources.Cached(c.WorkspaceID, mark, at); ok {
			return sc, s.checkMinPosition(r) // as await checks it
		}
	}
	wait := max(at, erased)
	if err := s.await(w, r, s.cfg.HolidaysProjected, wait); err != nil {
		return query.Scope{}, err
	}
	return s.cfg.Resources.Scope(r.Context(), c.WorkspaceID, mark, wait)
}

// parseDateTime reads an RFC 3339 date-time, the format the API's document
// gives asOf. time.Parse alone takes more: a one-digit hour (T0:00:00Z),
// a comma before the fraction (00:00:00,5Z), an offset of +24:00. The
// document's validators, and so the clients generated from it, refuse
// those, and so does this. RFC 3339 lets T and Z be written in lower case,
// which time.Parse does not take.
func parseDateTime(s string) (time.Time, bool) {
	// Digits where RFC 3339 has them, then an optional fraction and the
	// offset: Z or ±hh:mm.
	const shape = "dddd-dd-ddTdd:dd:dd"
	if len(s) < len(shape) {
		return time.Time{}, false
	}
	if s[10] == 't' || s[len(s)-1] == 'z' {
		b := []byte(s)
		if b[10] == 't' {
			b[10] = 'T'
		}
		if b[len(b)-1] == 'z' {
			b[len(b)-1] = 'Z'
		}
		s = string(b)
	}
	for i := range len(shape) {
		isDigit := '0' <= s[i] && s[i] <= '9'
		if shape[i] == 'd' && !isDigit || shape[i] != 'd' && s[i] != shape[i] {
			return time.Time{}, false
		}
	}
	rest := s[len(shape):]
	if frac, ok := strings.CutPrefix(rest, "."); ok {
		digits := len(frac) - len(strings.TrimLeft(frac, "0123456789"))
		if digits == 0 {
			return time.Time{}, false
		}
		rest = frac[digits:]
	}
	// time.Parse takes an offset of 24 hours too.
	offset := rest == "Z" || len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':' &&
		"00" <= rest[1:3] && rest[1:3] <= "23" && "00" <= rest[4:6] && rest[4:6] <= "59"
	if !offset {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	return t, err == nil
}

// holidayDetail is the holiday a write decided, as a read would show it:
// a people holiday's resources as the read model holds them, in today's
// forms also when an older Astro created it (events.NormalResourceIDs).
func holidayDetail(id string, h holidays.Holiday, scope query.Scope) query.HolidayDetailDto {
	d := query.HolidayDetailDto{ID: id, Reason: h.Reason, Type: h.Type, CountryID: []string{},
		Resources: scope.Applies(h.Type, h.CountryIDs, events.NormalResourceIDs(h.ResourceIDs))}
	if h.DateFrom != "" {
		d.DateFrom = &h.DateFrom
	}
	if h.DateTo != "" {
		d.DateTo = &h.DateTo
	}
	if h.Type == events.HolidayCountry {
		d.CountryID = h.CountryIDs
	}
	return d
}

func (s *Server) upsertResource(w http.ResponseWriter, r *http.Request, p httprouter.Params, c commands.Caller) error {
	var req ResourceDto
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	// The path's id as upstream services name their resources: a UUID, or
	// a name that stands for its name-based UUID (events.UpstreamID).
	cmd := holidays.UpsertResource{Caller: c, ResourceID: events.UpstreamID(p.ByName("id")), Name: req.Name, CountryCode: req.CountryCode, IsActive: req.IsActive, IsGuest: req.IsGuest}
	u, res, err := s.cfg.Holidays.UpsertResource.Handle(r.Context(), cmd)
	if err != nil {
		return err
	}
	s.setPosition(w, c, HistoryPositions, res.Seq)
	writeOK(w, ResourceDto{ID: u.ResourceID, Name: u.Name, CountryCode: u.CountryCode, IsActive: u.IsActive, IsGuest: u.IsGuest})
	return nil
}

// HolidayHistoryEntryDto is an entry of a holiday's history as c is
// given it: its log position sealed, as a write's X-Astro-Position is
// (PositionSeal), so the same event has the same position in both.
type HolidayHistoryEntryDto struct {
	history.HolidayEvent
	Sequence string `json:"sequence"`
}

// historyPage reads a history page's bounds: after, the sequence of the
// last entry of the page before (none: from the start), as c was given it,
// and $top, how many entries at most (none: history.MaxPage).
func (s *Server) historyPage(q url.Values, c commands.Caller) (after uint64, limit int, err error) {
	if err := singleValued(q, "after", "$top"); err != nil {
		return 0, 0, err
	}
	v := commands.Validation{}
	if a := strings.TrimSpace(q.Get("after")); a != "" {
		// The largest uint64 is no entry's sequence, and the log's read
		// from the one after it would wrap around to the start.
		var ok bool
		if after, ok = s.seal.Open(c.WorkspaceID, HistoryPositions, a); !ok || after == math.MaxUint64 {
			v.Add("after", "after must be the sequence of the last entry of the page before, as it was given.")
		}
	}
	if t := strings.TrimSpace(q.Get("$top")); t != "" {
		if limit, err = strconv.Atoi(t); err != nil || limit < 1 || limit > history.MaxPage {
			v.Add("$top", fmt.Sprintf("$top must be a whole number from 1 to %d.", history.MaxPage))
		}
	}
	return after, limit, v.Err()
}
