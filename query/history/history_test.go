package history_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"astro/commands"
	"astro/commands/holidays"
	"astro/events"
	"astro/events/natslog"
	"astro/events/natstest"
	"astro/query"
	"astro/query/country"
	"astro/query/history"
)

// writer runs the real handlers on a real log, each command on a clock of
// its own: the time an event records is when its request began, on the
// instance that served it, so the log's order need not be the order of
// its times.
type writer struct {
	t      *testing.T
	hs     *holidays.HolidayStore
	rs     *holidays.ResourceStore
	caller commands.Caller
}

func newWriter(t *testing.T) (*writer, *natslog.Log) {
	t.Helper()
	l, err := natslog.Open(context.Background(), natstest.Conn(t), natslog.Config{})
	if err != nil {
		t.Fatal(err)
	}
	hs, err := commands.NewStore(l, l.Snapshots(), holidays.NewHoliday, commands.StoreConfig{Name: holidays.HolidaySnapshotName})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := commands.NewStore(l, l.Snapshots(), holidays.NewResource, commands.StoreConfig{Name: holidays.ResourceSnapshotName})
	if err != nil {
		t.Fatal(err)
	}
	c := commands.Caller{UserID: "u1", WorkspaceID: "w1", Scopes: []string{holidays.ScopeResourcesWrite}}
	return &writer{t: t, hs: hs, rs: rs, caller: c}, l
}

func (w *writer) at(now time.Time) *holidays.Handlers {
	w.t.Helper()
	h, err := holidays.NewHandlers(w.hs, w.rs, country.Valid, func() time.Time { return now })
	if err != nil {
		w.t.Fatal(err)
	}
	return h
}

func (w *writer) create(now time.Time, reason, typ string, countries, people []string) string {
	w.t.Helper()
	id, _, _, err := w.at(now).Create.Handle(context.Background(), holidays.Create{Caller: w.caller, Reason: &reason, Type: typ,
		DateFrom: "2027-05-01", DateTo: "2027-05-01", CountryIDs: countries, ResourceIDs: people})
	if err != nil {
		w.t.Fatal(err)
	}
	return id
}

func (w *writer) rename(now time.Time, id, reason string) {
	w.t.Helper()
	if _, _, err := w.at(now).Rename.Handle(context.Background(), holidays.Rename{Caller: w.caller, HolidayID: id, Reason: &reason}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *writer) upsert(now time.Time, resource, countryCode string) {
	w.t.Helper()
	cmd := holidays.UpsertResource{Caller: w.caller, ResourceID: resource, CountryCode: countryCode, IsActive: true}
	if _, _, err := w.at(now).UpsertResource.Handle(context.Background(), cmd); err != nil {
		w.t.Fatal(err)
	}
}

func ids(rs []query.HolidayResourceDto) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}

// asOf answers a state the log held: the events it is built from are cut
// at one log position, the first of them recorded later than asOf's time,
// even when an event after it was recorded earlier (a request that began
// earlier, or an instance whose clock is behind, appending later).
func TestAsOfIsAStateTheLogHeld(t *testing.T) {
	w, l := newWriter(t)
	t0 := time.Date(2027, 1, 1, 12, 0, 0, 0, time.UTC)
	sec := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	const x, y, z, de = "00000000-0000-4000-8000-00000000000a", "00000000-0000-4000-8000-00000000000b",
		"00000000-0000-4000-8000-00000000000c", "00000000-0000-4000-8000-00000000000d"

	// In log order; the log's states, after each append, are
	//   1 Day {}   2 Day {x}   3 Day {x y}   4 Night {x y}   5 Night {x y z}
	// (de is in Germany, in no state of the British holiday's scope).
	gb := w.create(sec(0), "Day", "country", []string{"GB"}, nil)
	w.upsert(sec(10), x, "GB")
	w.upsert(sec(9), y, "GB")
	w.rename(sec(8), gb, "Night")
	w.upsert(sec(1), de, "DE")
	w.upsert(sec(20), z, "GB")
	// A people holiday's answer is its own events: a resource's does not
	// cut it.
	people := w.create(sec(0), "Offsite", "people", nil, []string{x})
	w.upsert(sec(30), x, "GB")
	w.rename(sec(5), people, "Away")

	h, err := history.NewHolidays(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		id        string
		at        time.Time
		reason    string // "" when the holiday did not exist then
		resources []string
	}{
		{"before the holiday", gb, sec(-1), "", nil},
		{"before every upsert", gb, sec(5), "Day", []string{}},
		{"a rename recorded earlier, after an upsert recorded later", gb, sec(8.5), "Day", []string{}},
		{"an upsert recorded earlier, after one recorded later", gb, sec(9.5), "Day", []string{}},
		{"both upserts and the rename", gb, sec(10), "Night", []string{x, y}},
		{"everything", gb, sec(60), "Night", []string{x, y, z}},
		{"people, before its rename", people, sec(4), "Offsite", []string{x}},
		{"people, its rename after a later upsert", people, sec(6), "Away", []string{x}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := h.AsOf(context.Background(), "w1", tc.id, tc.at)
			if tc.reason == "" {
				var ce *commands.Error
				if !errors.As(err, &ce) || ce.Code != commands.ENotFound {
					t.Fatalf("asOf %s: %+v, %v; want not found", tc.at, got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Reason != tc.reason || !slices.Equal(ids(got.Resources), tc.resources) {
				t.Fatalf("asOf %s: %q %v, want %q %v (a state the log held)", tc.at, got.Reason, ids(got.Resources), tc.reason, tc.resources)
			}
		})
	}
}

// TestHistoryTimesAreMicroseconds: every date-time the API writes has at
// most six fraction digits, as PostgreSQL keeps them; a clock reading
// nanoseconds recorded holiday events with nine.
func TestHistoryTimesAreMicroseconds(t *testing.T) {
	w, l := newWriter(t)
	at := time.Date(2027, 1, 1, 12, 0, 0, 123456789, time.UTC)
	id := w.create(at, "Day", "global", nil, nil)
	w.rename(at.Add(time.Nanosecond), id, "Night")
	h, err := history.NewHolidays(l)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := h.History(context.Background(), "w1", id, 0, history.MaxPage)
	if err != nil || len(entries) != 2 {
		t.Fatalf("history: %v, %+v", err, entries)
	}
	for _, e := range entries {
		if want := at.Truncate(time.Microsecond); !e.Time.Equal(want) {
			t.Errorf("%s at %s, want %s", e.Type, e.Time.Format(time.RFC3339Nano), want.Format(time.RFC3339Nano))
		}
	}
}

// An older release recorded events to the nanosecond, and history shows
// them to the microsecond: asOf at the time history shows finds the
// holiday, whatever its type (a global one's events are cut in another
// scan than a people one's).
func TestAsOfAtTheTimeHistoryShows(t *testing.T) {
	for _, typ := range []string{events.HolidayPeople, events.HolidayGlobal} {
		t.Run(typ, func(t *testing.T) {
			_, l := newWriter(t)
			const id = "00000000-0000-4000-8000-0000000000aa"
			agg := events.Aggregate{Kind: events.KindHoliday, ID: id}
			p := &events.HolidayCreated{HolidayID: id, Reason: "Day", Type: typ, DateFrom: "2027-05-01", DateTo: "2027-05-01",
				CountryIDs: []string{}, ResourceIDs: []string{}}
			if typ == events.HolidayPeople {
				p.ResourceIDs = []string{"00000000-0000-4000-8000-0000000000bb"}
			}
			e, err := events.New("00000000-0000-4000-8000-0000000000cc", events.Meta{WorkspaceID: "w1", ActorID: "u1"}, agg, p)
			if err != nil {
				t.Fatal(err)
			}
			e.Time = time.Date(2027, 1, 1, 12, 0, 0, 123456789, time.UTC) // as an older release recorded it
			if _, err := l.Append(context.Background(), events.Subject("w1", agg), 0, e); err != nil {
				t.Fatal(err)
			}
			h, err := history.NewHolidays(l)
			if err != nil {
				t.Fatal(err)
			}
			entries, err := h.History(context.Background(), "w1", id, 0, history.MaxPage)
			if err != nil || len(entries) != 1 {
				t.Fatalf("history: %v %+v", err, entries)
			}
			if _, err := h.AsOf(context.Background(), "w1", id, entries[0].Time); err != nil {
				t.Errorf("asOf %s, the creation time history shows: %v", entries[0].Time.Format(time.RFC3339Nano), err)
			}
		})
	}
}

// A history the log cannot give whole fails: with a 503 to retry when
// a retry may read it (an event of a type a newer build wrote, which a
// newer instance reads), and with a 500 when none will (a message that is
// no event, or an event whose data is not its type's JSON), which a 503
// would have clients retry for good.
func TestAHistoryThatCannotBeReadSaysWhetherToRetry(t *testing.T) {
	for _, tc := range []struct {
		name       string
		typ, data  string
		eventsOnly bool // false: a message with no event headers at all
		want       string
	}{
		{"no event", "", "garbage", false, commands.EInternal},
		{"data not its type's JSON", "HolidayRenamed", `{"newReason": 7}`, true, commands.EInternal},
		{"a type of a newer build", "HolidayMoved", `{}`, true, commands.EUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, l := newWriter(t)
			at := time.Date(2027, 1, 1, 12, 0, 0, 0, time.UTC)
			id := w.create(at, "Day", "global", nil, nil)
			bad := events.Event{ID: "00000000-0000-4000-8000-0000000000dd", Type: tc.typ, Version: 1, WorkspaceID: "w1",
				Aggregate: events.Aggregate{Kind: events.KindHoliday, ID: id}, Time: at, Data: []byte(tc.data)}
			msg := natslog.Encode(bad)
			if !tc.eventsOnly {
				msg = nats.NewMsg(msg.Subject)
				msg.Data = bad.Data
			}
			if _, err := l.JetStream().PublishMsg(t.Context(), msg); err != nil {
				t.Fatal(err)
			}
			h, err := history.NewHolidays(l)
			if err != nil {
				t.Fatal(err)
			}
			_, err = h.History(t.Context(), "w1", id, 0, history.MaxPage)
			if got := commands.ErrorCode(err); got != tc.want {
				t.Errorf("history: %s (%v), want %s", got, err, tc.want)
			}
			_, err = h.AsOf(t.Context(), "w1", id, at.Add(time.Hour))
			if got := commands.ErrorCode(err); got != tc.want {
				t.Errorf("asOf: %s (%v), want %s", got, err, tc.want)
			}
		})
	}
}
