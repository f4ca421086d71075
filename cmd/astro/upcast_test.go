package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"astro/events"
	"astro/events/natslog"
)

// TestUpcastHolidayCreatedV1 puts HolidayCreated events of version 1 (one
// "countryId" string, before countries became a list) into the log the way
// an older Astro wrote them, and shows that every reader takes them as
// version 2: the projection, the rename command, the history and asOf.
func TestUpcastHolidayCreatedV1(t *testing.T) {
	s := startService(t)
	upstream := token(t, "hr-sync", "w1", "resources:write")
	alice := token(t, "alice", "w1")
	s.upsertResource(upstream, "r-gb", "GB", true, false)
	s.upsertResource(upstream, "r-de", "DE", true, false)

	cases := []struct {
		name, typ    string
		v1Fields     string // the v1 payload's fields beside holidayId and the common ones
		wantCountry  []string
		wantResource []string
		logged       []string // the event's countryIds, as the history shows them
	}{
		{"country", "country", `"countryId":"GB","resourceIds":[]`, []string{"GB"}, idsOf("r-gb"), []string{"GB"}},
		{"global with an empty countryId", "global", `"countryId":"","resourceIds":[]`, []string{}, idsOf("r-de", "r-gb"), []string{}},
		{"people without countryId", "people", `"resourceIds":["` + idOf("r-de") + `"]`, []string{}, idsOf("r-de"), []string{}},
		// v1 took a country on any type: shown only for a country holiday,
		// by every reader, asOf's included (it showed it).
		{"global naming a country", "global", `"countryId":"GB","resourceIds":[]`, []string{}, idsOf("r-de", "r-gb"), []string{"GB"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := events.NewID(time.Now())
			data := fmt.Sprintf(`{"holidayId":%q,"reason":"Boxing Day","type":%q,"dateFrom":"2027-12-26","dateTo":"2027-12-26",%s}`, id, c.typ, c.v1Fields)
			appendV1(t, s, id, data)

			// The projection applies it like any other event: poll, bounded,
			// since nothing here waits for the read model.
			h := waitForHoliday(t, s, alice, id)
			if h.Reason != "Boxing Day" || h.Type != c.typ || !slices.Equal(h.CountryID, c.wantCountry) || !slices.Equal(h.resourceIDs(), c.wantResource) {
				t.Fatalf("projected v1 holiday: %+v, want countries %v and resources %v", h, c.wantCountry, c.wantResource)
			}

			// The rename command loads the aggregate from the v1 event.
			var renamed holidayDto
			s.call("PUT", "/api/data/holidays/"+id, alice, map[string]any{"reason": "St Stephen's Day"}).want(t, 200).decode(t, &renamed)
			if renamed.Reason != "St Stephen's Day" || !slices.Equal(renamed.CountryID, c.wantCountry) || *renamed.DateFrom != "2027-12-26" {
				t.Fatalf("renamed v1 holiday: %+v", renamed)
			}

			// The history shows the event at the version it was written with
			// and its data upcast to the current one.
			var hist []struct {
				Type      string
				Version   int
				Time      time.Time
				OldReason *string
				NewReason string
				Data      map[string]json.RawMessage
			}
			s.call("GET", "/api/data/holidays/"+id+"/history", alice, nil).want(t, 200).decode(t, &hist)
			if len(hist) != 2 || hist[0].Type != "HolidayCreated" || hist[0].Version != 1 || hist[0].NewReason != "Boxing Day" ||
				hist[1].Type != "HolidayRenamed" || *hist[1].OldReason != "Boxing Day" {
				t.Fatalf("history: %+v", hist)
			}
			var countries []string
			if err := json.Unmarshal(hist[0].Data["countryIds"], &countries); err != nil || !slices.Equal(countries, c.logged) {
				t.Fatalf("history data countryIds %s (%v), want %v", hist[0].Data["countryIds"], err, c.logged)
			}
			if _, ok := hist[0].Data["countryId"]; ok {
				t.Fatalf("history data still has the v1 countryId: %v", hist[0].Data)
			}

			// asOf before the rename computes the v1 holiday from the log.
			var then holidayDto
			at := hist[1].Time.Add(-time.Microsecond).Format(time.RFC3339Nano)
			s.call("GET", "/api/data/holidays/"+id+"?asOf="+at, alice, nil).want(t, 200).decode(t, &then)
			if then.Reason != "Boxing Day" || !slices.Equal(then.CountryID, c.wantCountry) || !slices.Equal(then.resourceIDs(), c.wantResource) {
				t.Fatalf("asOf before the rename: %+v", then)
			}
		})
	}

	// The log keeps them as written: at version 1, with the v1 schema.
	v1 := 0
	for _, m := range s.logMessages(t) {
		if m.Header.Get("ce-type") == "HolidayCreated" && m.Header.Get("ce-schemaversion") == "1" {
			v1++
		}
	}
	if v1 != len(cases) {
		t.Fatalf("%d HolidayCreated v1 in the log, want %d", v1, len(cases))
	}

	// The list expands the v1 country holiday under its one country.
	var days []struct {
		ID, Date  string
		CountryID int
	}
	s.call("GET", "/api/data/holidays/country?$filter="+urlq("countryId eq 'GB'"), alice, nil).want(t, 200).decode(t, &days)
	if len(days) != 1 || days[0].Date != "2027-12-26" || days[0].CountryID != 826 {
		t.Fatalf("country list: %+v", days)
	}
}

// appendV1 appends a HolidayCreated v1 with data as the first event of
// holiday id.
func appendV1(t *testing.T, s *service, id, data string) {
	t.Helper()
	appendAsWritten(t, s, "HolidayCreated", 1, events.Aggregate{Kind: events.KindHoliday, ID: id}, 0, data)
}

// appendAsWritten appends an event of type typ at version with data, as an
// older Astro wrote it, to aggregate agg after its subject's sequence
// after (0: as its first event), encoded by natslog as every event is with
// the expected subject sequence an append carries. It returns the event's
// position.
func appendAsWritten(t *testing.T, s *service, typ string, version int, agg events.Aggregate, after uint64, data string) uint64 {
	t.Helper()
	nc := s.connectNATS()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	msg := natslog.Encode(events.Event{
		ID: events.NewID(time.Now()), Type: typ, Version: version, WorkspaceID: "w1",
		Aggregate: agg, Time: time.Now().UTC(),
		ActorID: "legacy-import", Integration: "astro-v1", Data: json.RawMessage(data),
	})
	if got, want := msg.Header.Get("ce-dataschema"), natslog.DataSchema(typ, version); got != want {
		t.Fatalf("ce-dataschema %q, want %q", got, want)
	}
	msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(after, 10))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := js.PublishMsg(ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// waitForHoliday polls until the holiday's read model row exists.
func waitForHoliday(t *testing.T, s *service, tok, id string) holidayDto {
	t.Helper()
	var h holidayDto
	waitFor(t, 10*time.Second, func() error {
		env := s.call("GET", "/api/data/holidays/"+id, tok, nil)
		switch env.Status {
		case 200:
			env.decode(t, &h)
			return nil
		case 404:
			return fmt.Errorf("holiday %s never showed: HTTP %d %s", id, env.Status, env.raw)
		}
		t.Fatalf("holiday %s: HTTP %d %s", id, env.Status, env.raw)
		return nil
	})
	return h
}
