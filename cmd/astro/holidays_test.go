package main

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"astro/api"
	"astro/events"
)

type holidayDto struct {
	ID        string   `json:"id"`
	Reason    string   `json:"reason"`
	Type      string   `json:"type"`
	DateFrom  *string  `json:"dateFrom"`
	DateTo    *string  `json:"dateTo"`
	CountryID []string `json:"countryId"`
	Resources []struct {
		ID string `json:"id"`
	} `json:"resources"`
}

// resourceIDs are the ids of the holiday's resources, sorted.
func (h holidayDto) resourceIDs() []string {
	ids := []string{}
	for _, r := range h.Resources {
		ids = append(ids, r.ID)
	}
	slices.Sort(ids)
	return ids
}

// idsOf are the UUIDs of the resources called names (see idOf), sorted.
func idsOf(names ...string) []string {
	ids := []string{}
	for _, n := range names {
		ids = append(ids, idOf(n))
	}
	slices.Sort(ids)
	return ids
}

type historyEntry struct {
	Sequence        string    `json:"sequence"` // sealed, as X-Astro-Position
	CorrelationID   string    `json:"correlationId"`
	Type            string    `json:"type"`
	Time            time.Time `json:"time"`
	ActorID         string    `json:"actorId"`
	IntegrationName string    `json:"integrationName"`
	OldReason       *string   `json:"oldReason"`
	NewReason       string    `json:"newReason"`
}

// upsertResource records the resource called name (its id is idOf(name)).
func (s *service) upsertResource(tok, name, country string, active, guest bool) {
	s.t.Helper()
	s.call("PUT", "/api/data/resources/"+idOf(name), tok, map[string]any{
		"name": "Person " + name, "countryCode": country, "isActive": active, "isGuest": guest,
	}).want(s.t, 200)
}

func (s *service) createHoliday(tok string, body map[string]any) holidayDto {
	s.t.Helper()
	var h holidayDto
	s.call("POST", "/api/data/holidays", tok, body).want(s.t, 200).decode(s.t, &h)
	return h
}

func (s *service) holiday(tok, id string) holidayDto {
	s.t.Helper()
	var h holidayDto
	s.call("GET", "/api/data/holidays/"+id, tok, nil).want(s.t, 200).decode(s.t, &h)
	return h
}

func TestHolidaysEndToEnd(t *testing.T) {
	s := startService(t)
	upstream := token(t, "hr-sync", "w1", "resources:write")
	alice := token(t, "alice", "w1")
	s.upsertResource(upstream, "r-gb-1", "GB", true, false)
	s.upsertResource(upstream, "r-gb-guest", "GB", true, true)
	s.upsertResource(upstream, "r-de-1", "DE", true, false)
	s.upsertResource(upstream, "r-gb-old", "GB", false, false)

	global := s.createHoliday(alice, map[string]any{"reason": "  New Year  ", "type": "global", "dateFrom": "2027-01-01", "dateTo": "2027-01-01"})
	if global.Reason != "New Year" || global.Type != "global" || *global.DateFrom != "2027-01-01" || len(global.CountryID) != 0 {
		t.Fatalf("global: %+v", global)
	}
	if got := global.resourceIDs(); !slices.Equal(got, idsOf("r-de-1", "r-gb-1")) {
		t.Fatalf("global resources %v", got)
	}
	country := s.createHoliday(alice, map[string]any{"reason": "Boxing Day", "type": "country", "dateFrom": "2027-12-26", "dateTo": "2027-12-27", "countryId": []string{"gb"}})
	if !slices.Equal(country.CountryID, []string{"GB"}) || !slices.Equal(country.resourceIDs(), idsOf("r-gb-1")) {
		t.Fatalf("country: %+v", country)
	}
	people := s.createHoliday(alice, map[string]any{"reason": "Offsite", "type": "people", "dateFrom": "2027-03-01T00:00:00", "dateTo": "2027-03-03", "resources": []any{idOf("r-de-1"), map[string]string{"id": strings.ToUpper(idOf("r-gb-1"))}}})
	if !slices.Equal(people.resourceIDs(), idsOf("r-de-1", "r-gb-1")) || *people.DateFrom != "2027-03-01" {
		t.Fatalf("people: %+v", people)
	}

	// A resource change moves global and country scopes with no holiday event.
	s.upsertResource(upstream, "r-gb-1", "GB", false, false)
	s.upsertResource(upstream, "r-gb-2", "GB", true, false)
	if got := s.holiday(alice, country.ID).resourceIDs(); !slices.Equal(got, idsOf("r-gb-2")) {
		t.Fatalf("country resources after changes: %v", got)
	}
	if got := s.holiday(alice, global.ID).resourceIDs(); !slices.Equal(got, idsOf("r-de-1", "r-gb-2")) {
		t.Fatalf("global resources after changes: %v", got)
	}

	// Rename: only the reason changes, whatever else the body carries.
	before := s.holiday(alice, country.ID)
	var renamed holidayDto
	s.call("PUT", "/api/data/holidays/"+country.ID, alice, map[string]any{
		"reason": "St Stephen's Day", "type": "global", "dateFrom": "2030-01-01", "countryId": []string{"DE"}, "resources": []string{"x"},
	}, "x-integration-name", "calendar-app").want(t, 200).decode(t, &renamed)
	if renamed.Reason != "St Stephen's Day" || renamed.Type != before.Type || *renamed.DateFrom != *before.DateFrom ||
		*renamed.DateTo != *before.DateTo || !slices.Equal(renamed.CountryID, before.CountryID) || !slices.Equal(renamed.resourceIDs(), before.resourceIDs()) {
		t.Fatalf("rename changed more than the reason:\nbefore %+v\nafter  %+v", before, renamed)
	}
	// Renaming to the current name: 200 and no event. Field names are read
	// without regard to case, as ASP.NET Core reads them: a client that
	// writes "Reason" (.NET's default) means reason.
	s.call("PUT", "/api/data/holidays/"+country.ID, alice, map[string]any{"Reason": " St Stephen's Day "}).want(t, 200)
	// The public document makes the reason optional: without one (or with
	// null) the holiday keeps its name, and the answer is the holiday.
	for _, body := range []any{map[string]any{}, `{"reason":null}`, map[string]any{"dateFrom": "2030-01-01"}} {
		var same holidayDto
		s.call("PUT", "/api/data/holidays/"+country.ID, alice, body).want(t, 200).decode(t, &same)
		if same.Reason != "St Stephen's Day" || !slices.Equal(same.resourceIDs(), renamed.resourceIDs()) || *same.DateFrom != *renamed.DateFrom {
			t.Fatalf("a rename of %v answered %+v, want the holiday as it is %+v", body, same, renamed)
		}
	}

	var hist []historyEntry
	s.call("GET", "/api/data/holidays/"+country.ID+"/history", alice, nil).want(t, 200).decode(t, &hist)
	if len(hist) != 2 || hist[0].Type != "HolidayCreated" || hist[0].OldReason != nil || hist[0].NewReason != "Boxing Day" ||
		hist[1].Type != "HolidayRenamed" || *hist[1].OldReason != "Boxing Day" || hist[1].NewReason != "St Stephen's Day" ||
		hist[1].ActorID != "alice" || hist[1].IntegrationName != "calendar-app" || hist[1].CorrelationID == "" {
		t.Fatalf("history: %+v", hist)
	}

	// asOf: between creation and rename, the old name and the resources then.
	var then holidayDto
	at := hist[1].Time.Add(-time.Microsecond).Format(time.RFC3339Nano)
	s.call("GET", "/api/data/holidays/"+country.ID+"?asOf="+at, alice, nil).want(t, 200).decode(t, &then)
	if then.Reason != "Boxing Day" || !slices.Equal(then.resourceIDs(), idsOf("r-gb-2")) {
		t.Fatalf("asOf before the rename: %+v", then)
	}
	var created holidayDto
	s.call("GET", "/api/data/holidays/"+country.ID+"?asOf="+hist[0].Time.Format(time.RFC3339Nano), alice, nil).want(t, 200).decode(t, &created)
	if created.Reason != "Boxing Day" || !slices.Equal(created.resourceIDs(), idsOf("r-gb-1")) {
		t.Fatalf("asOf at creation (r-gb-1 was still active): %+v", created)
	}
	s.call("GET", "/api/data/holidays/"+country.ID+"?asOf=2000-01-01T00:00:00Z", alice, nil).want(t, 404)

	// Lists.
	// The public document's CountryHolidayDto: countryId is the ISO 3166-1
	// numeric code; the filter takes it or, as before, the alpha-2 code.
	// A date compares with a date and time as clients write one from a
	// time value (its day's start, in the literal's offset).
	for _, filter := range []string{"date ge 2027-12-27 and countryId eq 'GB'", "date ge 2027-12-27 and countryId eq 826",
		"date ge 2027-12-26T09:00:00Z and countryId eq 826", "date ge 2027-12-27T00:00:00.000-05:00 and countryId eq 826",
		"date gt datetime'2027-12-26T00:00:00' and date le 2027-12-27T23:59:59Z and countryId eq 826"} {
		var days []struct {
			ID, Date    string
			CountryID   int
			CountryName string
		}
		s.call("GET", "/api/data/holidays/country?$filter="+urlq(filter), alice, nil).want(t, 200).decode(t, &days)
		if len(days) != 1 || days[0].Date != "2027-12-27" || days[0].CountryID != 826 || days[0].CountryName != "United Kingdom" {
			t.Fatalf("country list %q: %+v", filter, days)
		}
	}
	var globals []struct{ ID, Date string }
	s.call("GET", "/api/data/holidays/global", alice, nil).want(t, 200).decode(t, &globals)
	if len(globals) != 1 || globals[0].ID != global.ID {
		t.Fatalf("global list: %+v", globals)
	}
	var byResource []struct{ ID, Date, ResourceID string }
	s.call("GET", "/api/data/holidays/resource?$filter="+urlq("resourceId eq '"+idOf("r-de-1")+"'")+"&$orderby=date", alice, nil).want(t, 200).decode(t, &byResource)
	if len(byResource) != 4 { // New Year + three offsite days
		t.Fatalf("resource list for r-de-1: %+v", byResource)
	}
	env := s.call("GET", "/api/data/holidays/global?$filter="+urlq("date gt"), alice, nil).want(t, 400)
	if !strings.Contains(env.Error.Message, "position") {
		t.Fatalf("bad filter message does not say where: %q", env.Error.Message)
	}
}

func urlq(s string) string { return strings.NewReplacer(" ", "%20", "'", "%27").Replace(s) }

func TestHolidayErrors(t *testing.T) {
	s := startService(t)
	alice := token(t, "alice", "w1")
	h := s.createHoliday(alice, map[string]any{"reason": "Founders Day", "type": "global", "dateFrom": "2027-05-01", "dateTo": "2027-05-01"})
	unknown := "0193a6a2-7c5e-7000-8000-000000000000"
	long := strings.Repeat("x", 201)
	valid := func(mod map[string]any) map[string]any {
		b := map[string]any{"reason": "R", "type": "country", "dateFrom": "2027-01-01", "dateTo": "2027-01-02", "countryId": []string{"GB"}}
		for k, v := range mod {
			if v == nil {
				delete(b, k)
			} else {
				b[k] = v
			}
		}
		return b
	}
	cases := []struct {
		name, method, path string
		body               any
		headers            []string
		status             int
		field              string
	}{
		{"rename empty reason", "PUT", "/api/data/holidays/" + h.ID, map[string]any{"reason": ""}, nil, 400, "reason"},
		{"rename blank reason", "PUT", "/api/data/holidays/" + h.ID, map[string]any{"reason": " \t "}, nil, 400, "reason"},
		{"rename too long", "PUT", "/api/data/holidays/" + h.ID, map[string]any{"reason": long}, nil, 400, "reason"},
		{"rename malformed id", "PUT", "/api/data/holidays/nope", map[string]any{"reason": "x"}, nil, 400, "id"},
		{"rename unknown id", "PUT", "/api/data/holidays/" + unknown, map[string]any{"reason": "x"}, nil, 404, ""},
		{"rename not json", "PUT", "/api/data/holidays/" + h.ID, `reason=x`, nil, 400, ""},
		{"rename wrong content type", "PUT", "/api/data/holidays/" + h.ID, `{"reason":"x"}`, []string{"Content-Type", "text/plain"}, 415, ""},
		{"rename reason not a string", "PUT", "/api/data/holidays/" + h.ID, `{"reason":5}`, nil, 400, "reason"},
		{"get malformed id", "GET", "/api/data/holidays/nope", nil, nil, 400, "id"},
		{"get unknown id", "GET", "/api/data/holidays/" + unknown, nil, nil, 404, ""},
		{"history unknown id", "GET", "/api/data/holidays/" + unknown + "/history", nil, nil, 404, ""},
		{"history unknown id after a position", "GET", "/api/data/holidays/" + unknown + "/history?after=" + sealPosition(t, api.HistoryPositions, 1), nil, nil, 404, ""},
		{"history after not a number", "GET", "/api/data/holidays/" + h.ID + "/history?after=x", nil, nil, 400, "after"},
		{"history after the largest number", "GET", "/api/data/holidays/" + h.ID + "/history?after=" + sealPosition(t, api.HistoryPositions, math.MaxUint64), nil, nil, 400, "after"},
		{"history after a bare number", "GET", "/api/data/holidays/" + h.ID + "/history?after=1", nil, nil, 400, "after"},
		{"history top zero", "GET", "/api/data/holidays/" + h.ID + "/history?$top=0", nil, nil, 400, "$top"},
		{"history top too large", "GET", "/api/data/holidays/" + h.ID + "/history?$top=1001", nil, nil, 400, "$top"},
		{"asOf malformed", "GET", "/api/data/holidays/" + h.ID + "?asOf=yesterday", nil, nil, 400, "asOf"},
		{"create missing type", "POST", "/api/data/holidays", valid(map[string]any{"type": nil}), nil, 400, "type"},
		{"create bad type", "POST", "/api/data/holidays", valid(map[string]any{"type": "lunar"}), nil, 400, "type"},
		{"create bad date", "POST", "/api/data/holidays", valid(map[string]any{"dateFrom": "2027-02-30"}), nil, 400, "dateFrom"},
		{"create reversed dates", "POST", "/api/data/holidays", valid(map[string]any{"dateFrom": "2027-02-03", "dateTo": "2027-02-01"}), nil, 400, "dateTo"},
		{"create country without country", "POST", "/api/data/holidays", valid(map[string]any{"countryId": nil}), nil, 400, "countryId"},
		{"create bad country", "POST", "/api/data/holidays", valid(map[string]any{"countryId": []string{"UK"}}), nil, 400, "countryId"},
		{"create country numbers", "POST", "/api/data/holidays", valid(map[string]any{"countryId": []int{826}}), nil, 400, "countryId"},
		{"create resource numbers", "POST", "/api/data/holidays", valid(map[string]any{"type": "people", "countryId": nil, "resources": []int{5}}), nil, 400, "resources"},
		{"create resource number ids", "POST", "/api/data/holidays", valid(map[string]any{"type": "people", "countryId": nil, "resources": []any{map[string]any{"id": 5}}}), nil, 400, "resources"},
		{"create people without resources", "POST", "/api/data/holidays", valid(map[string]any{"type": "people", "countryId": nil}), nil, 400, "resources"},
		{"create global with resources", "POST", "/api/data/holidays", valid(map[string]any{"type": "global", "countryId": nil, "resources": []string{"a"}}), nil, 400, "resources"},
		{"create too long a span", "POST", "/api/data/holidays", valid(map[string]any{"dateTo": "2029-01-01"}), nil, 400, "dateTo"},
		// The public document's ResourceHolidayDto.resourceId is a uuid: a
		// resource named otherwise stands for its name-based UUID
		// (TestSendNamesUpstreamIDsEndToEnd), unless it cannot be named.
		{"create people with a resource that cannot be named", "POST", "/api/data/holidays", valid(map[string]any{"type": "people", "countryId": nil, "resources": []string{"r-gb\x01"}}), nil, 400, "resources"},
		{"create people with a resource a uuid in braces", "POST", "/api/data/holidays", valid(map[string]any{"type": "people", "countryId": nil, "resources": []string{"{" + idOf("r-gb-1") + "}"}}), nil, 400, "resources"},
		{"resource without privilege", "PUT", "/api/data/resources/r1", map[string]any{"name": "x"}, nil, 403, ""},
		{"rename null body", "PUT", "/api/data/holidays/" + h.ID, `null`, nil, 400, ""},
		{"create list body", "POST", "/api/data/holidays", `[]`, nil, 400, ""},
		{"list top too large", "GET", "/api/data/holidays/global?$top=100000", nil, nil, 400, "$top"},
		{"list top too large in capitals", "GET", "/api/data/holidays/global?$TOP=100000", nil, nil, 400, "$top"},
		{"list top in two cases", "GET", "/api/data/holidays/global?$top=1&$Top=1000", nil, nil, 400, "$top"},
		{"history after in capitals not a number", "GET", "/api/data/holidays/" + h.ID + "/history?AFTER=x", nil, nil, 400, "after"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := s.call(c.method, c.path, alice, c.body, c.headers...).want(t, c.status)
			if c.field != "" && len(env.Error.ValidationErrors[c.field]) == 0 {
				t.Fatalf("no validationErrors.%s: %s", c.field, env.raw)
			}
		})
	}
	if got := s.holiday(alice, h.ID); got.Reason != "Founders Day" {
		t.Fatalf("failed renames changed the holiday: %+v", got)
	}
	// .NET's formatters send text/json, a JSON media type. Straight to the
	// server: api/openapi.json, which the harness's client holds every
	// exchange to, documents application/json only.
	req, err := http.NewRequest("PUT", s.base+"/api/data/holidays/"+h.ID, strings.NewReader(`{"reason":"Founders Day"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "text/json")
	req.Header.Set("Authorization", "Bearer "+alice)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("a rename as text/json: HTTP %d", resp.StatusCode)
	}
	writer := token(t, "hr-sync", "w1", "resources:write")
	if env := s.call("PUT", "/api/data/resources/%7B"+idOf("r1")+"%7D", writer, map[string]any{"name": "x", "countryCode": "GB", "isActive": true}).want(t, 400); len(env.Error.ValidationErrors["id"]) == 0 {
		t.Fatalf("resource id a uuid in braces: no validationErrors.id: %s", env.raw)
	}
}

// A holiday's history comes in pages (at most 1,000 entries each): one
// renamed without end cannot make an answer without end. Each page starts
// after the last entry of the one before.
func TestHolidayHistoryPages(t *testing.T) {
	s := startService(t)
	alice := token(t, "alice", "w1")
	h := s.createHoliday(alice, map[string]any{"reason": "r0", "type": "global", "dateFrom": "2027-05-01", "dateTo": "2027-05-01"})
	var renamedAt string
	for i := 1; i <= 4; i++ {
		renamedAt = s.call("PUT", "/api/data/holidays/"+h.ID, alice, map[string]any{"reason": fmt.Sprintf("r%d", i)}).want(t, 200).Header.Get("X-Astro-Position")
	}
	var all, paged []historyEntry
	s.call("GET", "/api/data/holidays/"+h.ID+"/history", alice, nil).want(t, 200).decode(t, &all)
	if len(all) == 5 && all[4].Sequence != renamedAt {
		t.Fatalf("the last rename answered position %q, its history entry %q", renamedAt, all[4].Sequence)
	}
	for after := ""; ; {
		var page []historyEntry
		s.call("GET", fmt.Sprintf("/api/data/holidays/%s/history?$top=2&after=%s", h.ID, after), alice, nil).want(t, 200).decode(t, &page)
		if len(page) > 2 {
			t.Fatalf("a page of %d entries, want at most 2", len(page))
		}
		paged = append(paged, page...)
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1].Sequence
	}
	if len(all) != 5 || !slices.EqualFunc(all, paged, func(a, b historyEntry) bool { return a.Sequence == b.Sequence && a.NewReason == b.NewReason }) {
		t.Fatalf("history %+v, in pages %+v; want the 5 entries both ways", all, paged)
	}
	if env := s.call("GET", fmt.Sprintf("/api/data/holidays/%s/history?after=%s", h.ID, all[4].Sequence), alice, nil).want(t, 200); string(env.Data) != "[]" {
		t.Fatalf("past the last entry: %s, want []", env.Data)
	}
}

func TestHolidayIsolation(t *testing.T) {
	s := startService(t)
	alice := token(t, "alice", "w1")
	mallory := token(t, "mallory", "w2")
	h := s.createHoliday(alice, map[string]any{"reason": "Secret", "type": "global", "dateFrom": "2027-05-01", "dateTo": "2027-05-01"})
	unknown := "0193a6a2-7c5e-7000-8000-000000000000"
	for _, c := range []struct{ method, path string }{
		{"GET", "/api/data/holidays/%s"},
		{"GET", "/api/data/holidays/%s/history"},
		{"GET", "/api/data/holidays/%s?asOf=2100-01-01T00:00:00Z"},
		{"PUT", "/api/data/holidays/%s"},
	} {
		var body any
		if c.method == "PUT" {
			body = map[string]any{"reason": "Pwned"}
		}
		foreign := s.call(c.method, fmt.Sprintf(c.path, h.ID), mallory, body).want(t, 404)
		missing := s.call(c.method, fmt.Sprintf(c.path, unknown), mallory, body).want(t, 404)
		if foreign.Error.Message != missing.Error.Message {
			t.Fatalf("%s: a foreign id answers unlike an unknown one: %q vs %q", c.path, foreign.Error.Message, missing.Error.Message)
		}
	}
	var list []struct{ ID string }
	s.call("GET", "/api/data/holidays/global", mallory, nil).want(t, 200).decode(t, &list)
	if len(list) != 0 {
		t.Fatalf("another workspace lists %+v", list)
	}
	if got := s.holiday(alice, h.ID); got.Reason != "Secret" {
		t.Fatalf("renamed from another workspace: %+v", got)
	}
}

func TestConcurrentRenames(t *testing.T) {
	s := startService(t)
	alice := token(t, "alice", "w1")
	h := s.createHoliday(alice, map[string]any{"reason": "Start", "type": "global", "dateFrom": "2027-05-01", "dateTo": "2027-05-01"})
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := strings.NewReader(fmt.Sprintf(`{"reason":"Name %02d"}`, i))
			req, _ := http.NewRequest("PUT", s.base+"/api/data/holidays/"+h.ID, body)
			req.Header.Set("Authorization", "Bearer "+alice)
			req.Header.Set("Content-Type", "application/json")
			resp, err := s.client.Do(req)
			if err != nil {
				errs <- err
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				errs <- fmt.Errorf("rename %d: HTTP %d", i, resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var hist []historyEntry
	s.call("GET", "/api/data/holidays/"+h.ID+"/history", alice, nil).want(t, 200).decode(t, &hist)
	if len(hist) != n+1 {
		t.Fatalf("%d history entries, want %d", len(hist), n+1)
	}
	names := map[string]bool{}
	for i := 1; i < len(hist); i++ {
		if *hist[i].OldReason != hist[i-1].NewReason {
			t.Fatalf("history breaks at %d: old %q after new %q", i, *hist[i].OldReason, hist[i-1].NewReason)
		}
		names[hist[i].NewReason] = true
	}
	if len(names) != n {
		t.Fatalf("%d distinct names in history, want %d", len(names), n)
	}
	if got := s.holiday(alice, h.ID).Reason; got != hist[n].NewReason {
		t.Fatalf("final name %q, last in history %q", got, hist[n].NewReason)
	}
}

// TestAHolidayWriteAnswersAfterAnErasuresEvent: a workspace's erasure
// removes its resources' events after its own event, long after when cut
// short at its deadline. A create in between answered the resources in
// scope from memory, as of their last event, while the read model (and a
// GET right after) already had none.
func TestAHolidayWriteAnswersAfterAnErasuresEvent(t *testing.T) {
	s := startService(t)
	alice := token(t, "alice", "w1")
	hr := token(t, "hr-sync", "w1", "resources:write")
	s.call("PUT", "/api/data/resources/"+idOf("r1"), hr, map[string]any{"name": "R", "countryCode": "GB", "isActive": true}).want(t, 200)
	if first := s.createHoliday(alice, map[string]any{"reason": "A", "type": "global", "dateFrom": "2027-01-01", "dateTo": "2027-01-01"}); len(first.resourceIDs()) != 1 {
		t.Fatalf("before the erasure a create answered %v, want r1", first.resourceIDs())
	}
	// The erasure's event, its removals not run yet.
	ws := events.Aggregate{Kind: events.KindWorkspace, ID: "w1"}
	appendAsWritten(t, s, "WorkspaceErased", 1, ws, 0, `{"erasureId":"`+events.NewID(time.Now())+`","holidays":1,"resources":1,"inboxes":0}`)
	second := s.createHoliday(alice, map[string]any{"reason": "B", "type": "global", "dateFrom": "2027-02-01", "dateTo": "2027-02-01"})
	got := s.holiday(alice, second.ID)
	if len(second.resourceIDs()) != 0 || len(got.resourceIDs()) != 0 {
		t.Fatalf("after the erasure's event a create answered %v, and a GET right after %v; want none", second.resourceIDs(), got.resourceIDs())
	}
}
