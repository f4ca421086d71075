package query_test

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"astro/commands"
	"astro/events"
	"astro/projections"
	"astro/projections/pgtest"
	"astro/query"
)

// TestMain stops the package's PostgreSQL after the tests. It serves every
// test file of the package: query has no other TestMain.
func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// Holiday ids, chosen so that their order is plain: G < G2 < C < P < N.
const (
	hG  = "10000000-0000-4000-8000-000000000001" // global, 2027-01-01..03
	hG2 = "10000000-0000-4000-8000-000000000002" // global, 2027-01-02
	hC  = "20000000-0000-4000-8000-000000000001" // country GB and FR, 2027-01-02..03
	hP  = "30000000-0000-4000-8000-000000000001" // people r9 and r1, 2027-01-05
	hN  = "40000000-0000-4000-8000-000000000001" // global without dates
	hX  = "90000000-0000-4000-8000-000000000001" // global of workspace ws2, 2027-01-01
	hD  = "a0000000-0000-4000-8000-000000000001" // country DE and FR of workspace ws4, 2027-01-01
)

// Resource ids, UUIDs as the projector stores them (an older Astro's
// names are TestLegacyIDsAreServedInTodaysForms's), ordered as their
// names: r0 < r1 < ... < r9.
const (
	r0 = "00000000-0000-4000-8000-000000000000"
	r1 = "00000000-0000-4000-8000-000000000001"
	r2 = "00000000-0000-4000-8000-000000000002"
	r3 = "00000000-0000-4000-8000-000000000003"
	r4 = "00000000-0000-4000-8000-000000000004"
	r5 = "00000000-0000-4000-8000-000000000005"
	r9 = "00000000-0000-4000-8000-000000000009"
	q1 = "0000000f-0000-4000-8000-000000000001" // of workspace ws2
)

// holidayEnv is a migrated database with the holidays projector and queries.
type holidayEnv struct {
	t   *testing.T
	db  *sqlx.DB
	p   *projections.Holidays
	q   *query.Holidays
	seq uint64 // the last log position handed out
}

func newHolidayEnv(t *testing.T) *holidayEnv {
	t.Helper()
	db := pgtest.Open(t)
	if err := projections.Migrate(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	p, err := projections.NewHolidays(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	q, err := query.NewHolidays(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	return &holidayEnv{t: t, db: db, p: p, q: q}
}

// event builds the next event of the log in workspace ws.
func (h *holidayEnv) event(ws string, p events.Payload) events.Event {
	h.t.Helper()
	var agg events.Aggregate
	switch v := p.(type) {
	case events.HolidayCreated:
		agg = events.Aggregate{Kind: events.KindHoliday, ID: v.HolidayID}
	case events.HolidayRenamed:
		agg = events.Aggregate{Kind: events.KindHoliday, ID: v.HolidayID}
	case events.ResourceUpserted:
		agg = events.Aggregate{Kind: events.KindResource, ID: v.ResourceID}
	default:
		h.t.Fatalf("no aggregate for %T", p)
	}
	h.seq++
	meta := events.Meta{WorkspaceID: ws, ActorID: "tester", Time: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	e, err := events.New(events.NameID("holidays test", strconv.FormatUint(h.seq, 10)), meta, agg, p)
	if err != nil {
		h.t.Fatal(err)
	}
	e.Seq = h.seq
	return e
}

// apply applies evs as one batch, the way the runner does.
func (h *holidayEnv) apply(evs ...events.Event) {
	h.t.Helper()
	tx, err := h.db.BeginTxx(h.t.Context(), nil)
	if err != nil {
		h.t.Fatal(err)
	}
	defer tx.Rollback()
	if err := h.p.Apply(h.t.Context(), tx, evs); err != nil {
		h.t.Fatalf("apply: %v", err)
	}
	if err := tx.Commit(); err != nil {
		h.t.Fatal(err)
	}
}

func resource(id, country string, active, guest bool) events.ResourceUpserted {
	return events.ResourceUpserted{ResourceID: id, Name: "Name of " + id, CountryCode: country, IsActive: active, IsGuest: guest}
}

// fixture is the log the list and detail tests read: holidays before and
// after the resources they cover, in two workspaces.
func (h *holidayEnv) fixture() []events.Event {
	h.t.Helper()
	return []events.Event{
		h.event("ws1", events.HolidayCreated{HolidayID: hG, Reason: "New Year", Type: events.HolidayGlobal, DateFrom: "2027-01-01", DateTo: "2027-01-03"}),
		h.event("ws1", resource(r1, "GB", true, false)),
		h.event("ws1", resource(r2, "GB", true, true)), // guest
		h.event("ws1", resource(r3, "FR", true, false)),
		h.event("ws1", resource(r4, "GB", false, false)), // inactive
		h.event("ws1", resource(r5, "DE", true, false)),
		h.event("ws1", events.HolidayCreated{HolidayID: hG2, Reason: "Bridge day", Type: events.HolidayGlobal, DateFrom: "2027-01-02", DateTo: "2027-01-02"}),
		h.event("ws1", events.HolidayCreated{HolidayID: hC, Reason: "Bank holiday", Type: events.HolidayCountry, DateFrom: "2027-01-02", DateTo: "2027-01-03", CountryIDs: []string{"GB", "FR"}}),
		h.event("ws1", events.HolidayCreated{HolidayID: hP, Reason: "Offsite", Type: events.HolidayPeople, DateFrom: "2027-01-05", DateTo: "2027-01-05", ResourceIDs: []string{r9, r1}}),
		h.event("ws1", events.HolidayCreated{HolidayID: hN, Reason: "Someday", Type: events.HolidayGlobal}),
		h.event("ws2", resource(q1, "GB", true, false)),
		h.event("ws2", events.HolidayCreated{HolidayID: hX, Reason: "Elsewhere", Type: events.HolidayGlobal, DateFrom: "2027-01-01", DateTo: "2027-01-01"}),
		// DE is 276 and FR 250: by number the other way round.
		h.event("ws4", events.HolidayCreated{HolidayID: hD, Reason: "Treaty day", Type: events.HolidayCountry, DateFrom: "2027-01-01", DateTo: "2027-01-01", CountryIDs: []string{"DE", "FR"}}),
	}
}

func ptr(s string) *string { return &s }

func resourceDtos(ids ...string) []query.HolidayResourceDto {
	out := []query.HolidayResourceDto{}
	for _, id := range ids {
		out = append(out, query.HolidayResourceDto{ID: id})
	}
	return out
}

func asJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// wantCode fails unless err is an application error with code.
func wantCode(t *testing.T, err error, code string) *commands.Error {
	t.Helper()
	var ce *commands.Error
	if !errors.As(err, &ce) || ce.Code != code {
		t.Fatalf("error %v, want code %s", err, code)
	}
	return ce
}

func TestHolidayGet(t *testing.T) {
	h := newHolidayEnv(t)
	h.apply(h.fixture()...)

	cases := []struct {
		name    string
		ws, id  string
		want    query.HolidayDetailDto
		wantErr string
	}{
		{name: "global covers active non-guests, sorted", ws: "ws1", id: hG, want: query.HolidayDetailDto{
			ID: hG, Reason: "New Year", Type: "global", DateFrom: ptr("2027-01-01"), DateTo: ptr("2027-01-03"),
			CountryID: []string{}, Resources: resourceDtos(r1, r3, r5)}},
		{name: "country covers its countries' active non-guests", ws: "ws1", id: hC, want: query.HolidayDetailDto{
			ID: hC, Reason: "Bank holiday", Type: "country", DateFrom: ptr("2027-01-02"), DateTo: ptr("2027-01-03"),
			CountryID: []string{"GB", "FR"}, Resources: resourceDtos(r1, r3)}},
		{name: "people keeps its resources as given", ws: "ws1", id: hP, want: query.HolidayDetailDto{
			ID: hP, Reason: "Offsite", Type: "people", DateFrom: ptr("2027-01-05"), DateTo: ptr("2027-01-05"),
			CountryID: []string{}, Resources: resourceDtos(r9, r1)}},
		{name: "no dates", ws: "ws1", id: hN, want: query.HolidayDetailDto{
			ID: hN, Reason: "Someday", Type: "global", CountryID: []string{}, Resources: resourceDtos(r1, r3, r5)}},
		{name: "upper-case id", ws: "ws1", id: strings.ToUpper(hG2), want: query.HolidayDetailDto{
			ID: hG2, Reason: "Bridge day", Type: "global", DateFrom: ptr("2027-01-02"), DateTo: ptr("2027-01-02"),
			CountryID: []string{}, Resources: resourceDtos(r1, r3, r5)}},
		{name: "other workspace's resources", ws: "ws2", id: hX, want: query.HolidayDetailDto{
			ID: hX, Reason: "Elsewhere", Type: "global", DateFrom: ptr("2027-01-01"), DateTo: ptr("2027-01-01"),
			CountryID: []string{}, Resources: resourceDtos(q1)}},
		{name: "another workspace's holiday", ws: "ws1", id: hX, wantErr: commands.ENotFound},
		{name: "unknown id", ws: "ws1", id: "50000000-0000-4000-8000-000000000001", wantErr: commands.ENotFound},
		{name: "not a uuid", ws: "ws1", id: "new-year", wantErr: commands.ENotFound},
		{name: "empty id", ws: "ws1", id: "", wantErr: commands.ENotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := h.q.Get(t.Context(), c.ws, c.id)
			if c.wantErr != "" {
				wantCode(t, err, c.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got  %s\nwant %s", asJSON(t, got), asJSON(t, c.want))
			}
		})
	}

	// Empty lists are JSON arrays, never null.
	got, err := h.q.Get(t.Context(), "ws1", hG)
	if err != nil {
		t.Fatal(err)
	}
	if s := asJSON(t, got); !strings.Contains(s, `"countryId":[]`) {
		t.Errorf("countryId is not []: %s", s)
	}
}

// A holiday's scope follows its resources without any holiday event.
func TestHolidayResourcesFollowResources(t *testing.T) {
	h := newHolidayEnv(t)
	h.apply(
		h.event("ws1", events.HolidayCreated{HolidayID: hG, Reason: "All", Type: events.HolidayGlobal, DateFrom: "2027-01-01", DateTo: "2027-01-01"}),
		h.event("ws1", events.HolidayCreated{HolidayID: hC, Reason: "GB", Type: events.HolidayCountry, DateFrom: "2027-01-01", DateTo: "2027-01-01", CountryIDs: []string{"GB"}}),
		h.event("ws1", events.HolidayCreated{HolidayID: hP, Reason: "Some", Type: events.HolidayPeople, DateFrom: "2027-01-01", DateTo: "2027-01-01", ResourceIDs: []string{r2}}),
	)
	steps := []struct {
		name                    string
		upsert                  events.ResourceUpserted
		global, country, people []string
	}{
		{"first resource", resource(r2, "GB", true, false), []string{r2}, []string{r2}, []string{r2}},
		{"another country", resource(r1, "FR", true, false), []string{r1, r2}, []string{r2}, []string{r2}},
		{"moves into the country", resource(r1, "GB", true, false), []string{r1, r2}, []string{r1, r2}, []string{r2}},
		{"becomes a guest", resource(r2, "GB", true, true), []string{r1}, []string{r1}, []string{r2}},
		{"deactivated", resource(r1, "GB", false, false), []string{}, []string{}, []string{r2}},
		{"reactivated, no longer a guest", resource(r2, "GB", true, false), []string{r2}, []string{r2}, []string{r2}},
		{"another workspace's resource", events.ResourceUpserted{}, []string{r2}, []string{r2}, []string{r2}},
	}
	for _, s := range steps {
		if s.upsert.ResourceID == "" {
			h.apply(h.event("ws2", resource(r0, "GB", true, false)))
		} else {
			h.apply(h.event("ws1", s.upsert))
		}
		for _, c := range []struct {
			id   string
			want []string
		}{{hG, s.global}, {hC, s.country}, {hP, s.people}} {
			got, err := h.q.Get(t.Context(), "ws1", c.id)
			if err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
			if want := resourceDtos(c.want...); !reflect.DeepEqual(got.Resources, want) {
				t.Errorf("%s: %s resources %v, want %v", s.name, got.Type, got.Resources, want)
			}
		}
	}
}

// snapshot is everything the queries say about the fixture's workspace.
func snapshot(t *testing.T, h *holidayEnv) string {
	t.Helper()
	var parts []any
	for _, id := range []string{hG, hG2, hC, hP, hN} {
		d, err := h.q.Get(t.Context(), "ws1", id)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, d)
	}
	g, err := h.q.Global(t.Context(), "ws1", query.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := h.q.Country(t.Context(), "ws1", query.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := h.q.Resource(t.Context(), "ws1", query.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return asJSON(t, append(parts, g, c, r))
}

func TestHolidayApplyIsIdempotent(t *testing.T) {
	h := newHolidayEnv(t)
	evs := h.fixture()
	h.apply(evs...)
	want := snapshot(t, h)

	h.apply(evs...)
	if got := snapshot(t, h); got != want {
		t.Errorf("after applying twice:\n got %s\nwant %s", got, want)
	}

	// A batch may hold several upserts of one resource; the newest wins.
	h.apply(h.event("ws1", resource(r1, "GB", false, false)), h.event("ws1", resource(r1, "GB", true, false)))
	if got := snapshot(t, h); got != want {
		t.Errorf("after two upserts of r1 in a batch:\n got %s\nwant %s", got, want)
	}

	// A replay of an older upsert does not undo a newer one.
	h.apply(evs[1]) // r1, active
	newer := h.event("ws1", resource(r1, "GB", false, false))
	h.apply(newer)
	gone := snapshot(t, h)
	h.apply(evs[1])
	if got := snapshot(t, h); got != gone {
		t.Errorf("an old upsert replayed after a newer one changed the read model:\n got %s\nwant %s", got, gone)
	}
}

func TestHolidayRename(t *testing.T) {
	h := newHolidayEnv(t)
	h.apply(h.fixture()...)
	for _, id := range []string{hG, hC, hP} {
		before, err := h.q.Get(t.Context(), "ws1", id)
		if err != nil {
			t.Fatal(err)
		}
		first := h.event("ws1", events.HolidayRenamed{HolidayID: id, OldReason: before.Reason, NewReason: "First " + id})
		second := h.event("ws1", events.HolidayRenamed{HolidayID: id, OldReason: "First " + id, NewReason: "Second " + id})
		h.apply(first, second)
		h.apply(first) // a replay of the older rename changes nothing

		after, err := h.q.Get(t.Context(), "ws1", id)
		if err != nil {
			t.Fatal(err)
		}
		want := before
		want.Reason = "Second " + id
		if !reflect.DeepEqual(after, want) {
			t.Errorf("after rename\n got %s\nwant %s", asJSON(t, after), asJSON(t, want))
		}
	}

	// A rename of another workspace's holiday does not touch it.
	h.apply(h.event("ws2", events.HolidayRenamed{HolidayID: hG, OldReason: "x", NewReason: "Hijacked"}))
	got, err := h.q.Get(t.Context(), "ws1", hG)
	if err != nil {
		t.Fatal(err)
	}
	if got.Reason != "Second "+hG {
		t.Errorf("reason %q after another workspace's rename", got.Reason)
	}
}

func TestHolidayLists(t *testing.T) {
	h := newHolidayEnv(t)
	h.apply(h.fixture()...)

	type g = query.GlobalHolidayDto
	type c = query.CountryHolidayDto
	type r = query.ResourceHolidayDto
	global := func(ws string, o query.ListOptions) (any, error) { return h.q.Global(t.Context(), ws, o) }
	country := func(ws string, o query.ListOptions) (any, error) { return h.q.Country(t.Context(), ws, o) }
	resources := func(ws string, o query.ListOptions) (any, error) { return h.q.Resource(t.Context(), ws, o) }
	const gb, fr = "United Kingdom", "France"

	cases := []struct {
		name string
		list func(string, query.ListOptions) (any, error)
		ws   string
		o    query.ListOptions
		want any
	}{
		{"global: a row per day, by date then id", global, "ws1", query.ListOptions{},
			[]g{{hG, "2027-01-01"}, {hG, "2027-01-02"}, {hG2, "2027-01-02"}, {hG, "2027-01-03"}}},
		{"global: orderby id desc, then date", global, "ws1", query.ListOptions{OrderBy: "id desc"},
			[]g{{hG2, "2027-01-02"}, {hG, "2027-01-01"}, {hG, "2027-01-02"}, {hG, "2027-01-03"}}},
		{"global: top and skip", global, "ws1", query.ListOptions{Top: "2", Skip: "1"},
			[]g{{hG, "2027-01-02"}, {hG2, "2027-01-02"}}},
		{"global: top 0", global, "ws1", query.ListOptions{Top: "0"}, []g{}},
		{"global: skip past the end", global, "ws1", query.ListOptions{Skip: "10"}, []g{}},
		{"global: date range", global, "ws1", query.ListOptions{Filter: "date ge 2027-01-02 and date le '2027-01-02'"},
			[]g{{hG, "2027-01-02"}, {hG2, "2027-01-02"}}},
		{"global: upper-case id", global, "ws1", query.ListOptions{Filter: "id eq '" + strings.ToUpper(hG2) + "'"},
			[]g{{hG2, "2027-01-02"}}},
		{"global: other workspace", global, "ws2", query.ListOptions{}, []g{{hX, "2027-01-01"}}},
		{"global: unknown workspace", global, "ws3", query.ListOptions{}, []g{}},

		{"country: a row per day and country", country, "ws1", query.ListOptions{},
			[]c{{hC, "2027-01-02", 250, fr}, {hC, "2027-01-02", 826, gb}, {hC, "2027-01-03", 250, fr}, {hC, "2027-01-03", 826, gb}}},
		{"country: date and country", country, "ws1", query.ListOptions{Filter: "date ge 2027-01-02 and countryId eq 'GB'"},
			[]c{{hC, "2027-01-02", 826, gb}, {hC, "2027-01-03", 826, gb}}},
		{"country: by name", country, "ws1", query.ListOptions{Filter: "countryName eq 'France' and date gt 2027-01-02"},
			[]c{{hC, "2027-01-03", 250, fr}}},
		{"country: orderby name desc", country, "ws1", query.ListOptions{OrderBy: "countryName desc"},
			[]c{{hC, "2027-01-02", 826, gb}, {hC, "2027-01-03", 826, gb}, {hC, "2027-01-02", 250, fr}, {hC, "2027-01-03", 250, fr}}},
		{"country: not", country, "ws1", query.ListOptions{Filter: "not (countryId eq 'GB') and date eq 2027-01-03"},
			[]c{{hC, "2027-01-03", 250, fr}}},
		{"country: by numeric code", country, "ws1", query.ListOptions{Filter: "countryId eq 826 and date eq 2027-01-02"},
			[]c{{hC, "2027-01-02", 826, gb}}},
		{"country: by alpha-2 code in any case", country, "ws1", query.ListOptions{Filter: "countryId eq 'fr' and date eq 2027-01-02"},
			[]c{{hC, "2027-01-02", 250, fr}}},
		{"country: orderby countryId desc", country, "ws1", query.ListOptions{OrderBy: "countryId desc, date"},
			[]c{{hC, "2027-01-02", 826, gb}, {hC, "2027-01-03", 826, gb}, {hC, "2027-01-02", 250, fr}, {hC, "2027-01-03", 250, fr}}},
		{"country: an alpha-2 code compares as its number", country, "ws1", query.ListOptions{Filter: "countryId gt 'FR' and date eq 2027-01-03"},
			[]c{{hC, "2027-01-03", 826, gb}}},
		{"country: none in the other workspace", country, "ws2", query.ListOptions{}, []c{}},
		{"country: by countryId, the number, not the alpha-2 code", country, "ws4", query.ListOptions{},
			[]c{{hD, "2027-01-01", 250, fr}, {hD, "2027-01-01", 276, "Germany"}}},

		{"resource: one resource's days off, any type", resources, "ws1", query.ListOptions{Filter: "resourceId eq '" + r1 + "'"},
			[]r{{hG, "2027-01-01", r1}, {hG, "2027-01-02", r1}, {hG2, "2027-01-02", r1}, {hC, "2027-01-02", r1},
				{hG, "2027-01-03", r1}, {hC, "2027-01-03", r1}, {hP, "2027-01-05", r1}}},
		{"resource: people, assigned resources only", resources, "ws1", query.ListOptions{Filter: "date eq 2027-01-05"},
			[]r{{hP, "2027-01-05", r1}, {hP, "2027-01-05", r9}}},
		{"resource: inactive and guests have none", resources, "ws1", query.ListOptions{Filter: "resourceId eq '" + r4 + "' or resourceId eq '" + r2 + "'"}, []r{}},
		{"resource: top and skip", resources, "ws1", query.ListOptions{Filter: "date eq 2027-01-01", Top: "2", Skip: "1"},
			[]r{{hG, "2027-01-01", r3}, {hG, "2027-01-01", r5}}},
		{"resource: orderby resourceId desc", resources, "ws1", query.ListOptions{Filter: "date eq 2027-01-03", OrderBy: "resourceId desc"},
			[]r{{hG, "2027-01-03", r5}, {hG, "2027-01-03", r3}, {hC, "2027-01-03", r3}, {hG, "2027-01-03", r1}, {hC, "2027-01-03", r1}}},
		{"resource: user order first, then the default", resources, "ws1", query.ListOptions{Filter: "date ge 2027-01-02 and date le 2027-01-02", OrderBy: "id desc, resourceId"},
			[]r{{hC, "2027-01-02", r1}, {hC, "2027-01-02", r3}, {hG2, "2027-01-02", r1}, {hG2, "2027-01-02", r3}, {hG2, "2027-01-02", r5},
				{hG, "2027-01-02", r1}, {hG, "2027-01-02", r3}, {hG, "2027-01-02", r5}}},
		{"resource: other workspace", resources, "ws2", query.ListOptions{}, []r{{hX, "2027-01-01", q1}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.list(tc.ws, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			if s := asJSON(t, got); !strings.HasPrefix(s, "[") {
				t.Errorf("JSON %s is not an array", s)
			}
		})
	}
}

// Paging through a list with a user order that ties everywhere still sees
// every row once.
func TestHolidayListPagingIsStable(t *testing.T) {
	h := newHolidayEnv(t)
	h.apply(h.fixture()...)
	all, err := h.q.Resource(t.Context(), "ws1", query.ListOptions{OrderBy: "date"})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 18 {
		t.Fatalf("%d rows, want 18", len(all))
	}
	var paged []query.ResourceHolidayDto
	for skip := 0; skip < len(all)+3; skip += 4 {
		page, err := h.q.Resource(t.Context(), "ws1", query.ListOptions{OrderBy: "date", Top: "4", Skip: strconv.Itoa(skip)})
		if err != nil {
			t.Fatal(err)
		}
		paged = append(paged, page...)
	}
	if !reflect.DeepEqual(paged, all) {
		t.Errorf("pages %+v\nwant  %+v", paged, all)
	}
}

// A list asked for without $top answers as much of it as a page holds:
// the envelope has no next page, so the client takes it for the whole.
func TestHolidayListWithoutTop(t *testing.T) {
	h := newHolidayEnv(t)
	h.apply(
		h.event("ws1", events.HolidayCreated{HolidayID: hG, Reason: "Sabbatical", Type: events.HolidayGlobal, DateFrom: "2027-01-01", DateTo: "2027-12-31"}),
		h.event("ws1", events.HolidayCreated{HolidayID: hG2, Reason: "Sabbatical", Type: events.HolidayGlobal, DateFrom: "2028-01-01", DateTo: "2028-12-31"}),
		h.event("ws1", events.HolidayCreated{HolidayID: hN, Reason: "Sabbatical", Type: events.HolidayGlobal, DateFrom: "2029-01-01", DateTo: "2029-12-31"}),
	)
	for _, o := range []query.ListOptions{{}, {Filter: "date ge 2027-01-01"}, {OrderBy: "date desc"}} {
		got, err := h.q.Global(t.Context(), "ws1", o)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != query.HolidayListMaxTop {
			t.Errorf("%+v: %d rows of 1,096, want %d", o, len(got), query.HolidayListMaxTop)
		}
	}
}

func TestHolidayListErrors(t *testing.T) {
	h := newHolidayEnv(t)
	global := func(o query.ListOptions) error { _, err := h.q.Global(t.Context(), "ws1", o); return err }
	country := func(o query.ListOptions) error { _, err := h.q.Country(t.Context(), "ws1", o); return err }
	resources := func(o query.ListOptions) error { _, err := h.q.Resource(t.Context(), "ws1", o); return err }

	cases := []struct {
		name   string
		list   func(query.ListOptions) error
		o      query.ListOptions
		option string // the field of the error
		text   string // in the message
	}{
		{"bad date", country, query.ListOptions{Filter: "date ge 2027-13-01"}, "$filter", "position 9"},
		{"unfinished filter", global, query.ListOptions{Filter: "date ge"}, "$filter", "position"},
		{"field of another list", global, query.ListOptions{Filter: "countryId eq 'GB'"}, "$filter", `position 1: unknown field "countryId"`},
		{"country code not assigned", country, query.ListOptions{Filter: "countryId eq 'UK'"}, "$filter", "alpha-2"},
		{"country code a date", country, query.ListOptions{Filter: "countryId eq 2027-01-01"}, "$filter", "whole number"},
		{"id not a uuid", resources, query.ListOptions{Filter: "id eq 'x'"}, "$filter", "position 7"},
		{"unknown order", resources, query.ListOptions{OrderBy: "reason"}, "$orderby", "position 1"},
		{"top too large", global, query.ListOptions{Top: "1001"}, "$top", "1000"},
		{"negative skip", global, query.ListOptions{Skip: "-1"}, "$skip", "whole number"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ce := wantCode(t, c.list(c.o), commands.EInvalid)
			if !strings.Contains(ce.Message, c.option) || !strings.Contains(ce.Message, c.text) {
				t.Errorf("message %q, want it to name %s and contain %q", ce.Message, c.option, c.text)
			}
			if msgs := ce.Fields[c.option]; len(msgs) != 1 || msgs[0] != ce.Message {
				t.Errorf("fields %v, want %s: [%q]", ce.Fields, c.option, ce.Message)
			}
		})
	}
}

// A workspace's scope comes from memory, at the position up to which the
// history stream went past, for as long as nothing of its resources went
// past after the scope was read.
func TestScopeAsSeen(t *testing.T) {
	h := newHolidayEnv(t)
	seen := query.NewScopesSeen()
	q, err := query.NewResources(t.Context(), h.db, seen)
	if err != nil {
		t.Fatal(err)
	}
	gen := seen.Started(0, 0)
	delivered := uint64(0)
	deliver := func(evs ...events.Event) {
		t.Helper()
		for _, e := range evs {
			delivered++
			seen.Delivered(gen, events.Subject(e.WorkspaceID, e.Aggregate), e.Seq, delivered, true)
		}
		h.apply(evs...)
	}
	current := func(name string, last uint64, want []string, wantAt uint64) {
		t.Helper()
		s, at, ok := q.Current("ws1", last)
		if want == nil {
			if ok {
				t.Fatalf("%s: scope %v at %d from memory, want none", name, s.IDs, at)
			}
			return
		}
		if !ok || at != wantAt || !reflect.DeepEqual(s.IDs, want) {
			t.Fatalf("%s: scope %v at %d (%v), want %v at %d", name, s.IDs, at, ok, want, wantAt)
		}
	}
	read := func(at uint64) {
		t.Helper()
		mark := q.Mark()
		if _, err := q.Scope(t.Context(), "ws1", mark, at); err != nil {
			t.Fatal(err)
		}
	}

	e1 := h.event("ws1", resource(r1, "GB", true, false))
	deliver(e1)
	current("never read", e1.Seq, nil, 0)
	read(e1.Seq)
	current("read", e1.Seq, []string{r1}, e1.Seq)
	e2 := h.event("ws1", events.HolidayCreated{HolidayID: hG, Reason: "All", Type: events.HolidayGlobal, DateFrom: "2027-01-01", DateTo: "2027-01-01"})
	deliver(e2, h.event("ws2", resource(q1, "GB", true, false)))
	current("a holiday and another workspace's resource went past", e2.Seq+1, []string{r1}, e2.Seq+1)
	e4 := h.event("ws1", resource(r2, "GB", true, false))
	deliver(e4)
	current("its resource went past", e4.Seq, nil, 0)
	read(e4.Seq)
	current("read again", e4.Seq, []string{r1, r2}, e4.Seq)
	seen.Stopped()
	current("deliveries stopped", e4.Seq, nil, 0)
}
