package api

import (
	"encoding/json"
	"errors"
	"math"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"astro/commands"
)

func TestFlatQuery(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want url.Values // nil: left as it is
	}{
		{"asFlatList=true", nil},
		{"params[asFlatList]=true", url.Values{"asFlatList": {"true"}}},
		{"params%5BasFlatList%5D=true&params%5B%24top%5D=5", url.Values{"asFlatList": {"true"}, "$top": {"5"}}},
		{"params[notificationTypes][]=a&params[notificationTypes][]=b", url.Values{"notificationTypes": {"a", "b"}}},
		{"params[notificationTypes][0]=a&params[notificationTypes][1]=b", url.Values{"notificationTypes": {"a", "b"}}},
		{"notificationTypes[]=a&lastId=x", url.Values{"notificationTypes": {"a"}, "lastId": {"x"}}},
		{"params[$filter]=countryId eq 'GB'", url.Values{"$filter": {"countryId eq 'GB'"}}},
		{"a[b]=1", nil}, // not an array index: kept
		{"params[]=1", url.Values{"params": {"1"}}}, // an array named params
		{"params[x=%zz", nil},                       // does not parse: serve refuses it (queryError)
		{"", nil},
		// A known name in any case is that name; others are left alone.
		{"LastId=x&lastid=y&LASTID=z", url.Values{"lastId": {"x", "y", "z"}}},
		{"AsFlatList=true&SenderId=b&NotificationTypes=a", url.Values{"asFlatList": {"true"}, "senderId": {"b"}, "notificationTypes": {"a"}}},
		{"$TOP=1&$Skip=2&$Filter=f&$OrderBy=o&ASOF=t&After=3", url.Values{"$top": {"1"}, "$skip": {"2"}, "$filter": {"f"}, "$orderby": {"o"}, "asOf": {"t"}, "after": {"3"}}},
		{"%24TOP=1", url.Values{"$top": {"1"}}},
		{"params[AsFlatList]=true&NotificationTypes[]=a", url.Values{"asFlatList": {"true"}, "notificationTypes": {"a"}}},
		{"Ticket=t&LastEventID=4&Access_Token=x", url.Values{"ticket": {"t"}, "lastEventId": {"4"}, "access_token": {"x"}}},
		{"Foo=1&lastId=x", nil},
	} {
		got := flatQuery(tc.raw)
		if tc.want == nil {
			if got != tc.raw {
				t.Errorf("%q: rewritten to %q", tc.raw, got)
			}
			continue
		}
		q, err := url.ParseQuery(got)
		if err != nil || !reflect.DeepEqual(q, tc.want) {
			t.Errorf("%q: %q (%v), want %v", tc.raw, got, err, tc.want)
		}
	}
	// A pair whose name does not parse is kept as it is; the others are
	// still read.
	if got := flatQuery("%zz=1&LastId=x"); got != "%zz=1&lastId=x" {
		t.Errorf("%%zz=1&LastId=x: %q", got)
	}
}

func TestSingleValued(t *testing.T) {
	for _, tc := range []struct {
		raw     string
		refused []string // the fields refused, sorted
	}{
		{"$top=5", nil},
		{"$top=5&$top=5", nil}, // the same value repeated is that value
		{"$top=1&%24top=100000", []string{"$top"}},
		{"$top=1&$top=", []string{"$top"}},
		{"$filter=a&$orderby=b&$skip=1&$skip=2&asOf=x&asOf=y", []string{"$skip", "asOf"}},
		{"notificationTypes=a&notificationTypes=b", nil}, // not single-valued
		{"", nil},
		// Case variants of one name are that name given twice.
		{"$top=1&$TOP=1000", []string{"$top"}},
		{"$TOP=1&$Top=1000", []string{"$top"}},
		{"$top=5&$TOP=5", nil},
		{"AsOf=x&asOf=y&$Skip=1", []string{"asOf"}},
	} {
		q, err := url.ParseQuery(tc.raw)
		if err != nil {
			t.Fatal(err)
		}
		err = singleValued(q, "$filter", "$orderby", "$top", "$skip", "asOf")
		var got []string
		if err != nil {
			var e *commands.Error
			if !errors.As(err, &e) || e.Code != commands.EInvalid {
				t.Fatalf("%q: %v, want a validation error", tc.raw, err)
			}
			for field := range e.Fields {
				got = append(got, field)
			}
			slices.Sort(got)
		}
		if !reflect.DeepEqual(got, tc.refused) {
			t.Errorf("%q: refused %v, want %v", tc.raw, got, tc.refused)
		}
	}
}

// TestQueryNamesCoverTheDocument: every query parameter the served
// document names is read in any case.
func TestQueryNamesCoverTheDocument(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage
	}
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			var o struct {
				Parameters []struct{ Name, In string }
			}
			if json.Unmarshal(op, &o) != nil {
				continue // not an operation (a path's own parameters)
			}
			for _, p := range o.Parameters {
				if p.In == "query" && queryName(strings.ToUpper(p.Name)) != p.Name {
					t.Errorf("%s %s: query parameter %s is not in queryNames", method, path, p.Name)
				}
			}
		}
	}
}

func TestHistoryPage(t *testing.T) {
	seal, err := NewPositionSeal([]byte("a key of at least thirty-two bytes!"))
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{seal: seal}
	c := commands.Caller{UserID: "u1", WorkspaceID: "w1"}
	for _, tc := range []struct {
		raw     string
		after   uint64
		limit   int
		refused string // the field refused
	}{
		{"", 0, 0, ""},
		{"after=" + seal.Seal("w1", HistoryPositions, 0) + "&$top=1", 0, 1, ""},
		{"after=%20" + seal.Seal("w1", HistoryPositions, 42) + "%20", 42, 0, ""},
		{"after=" + seal.Seal("w1", HistoryPositions, math.MaxUint64-1) + "&$top=1000", math.MaxUint64 - 1, 1000, ""},
		{"after=" + seal.Seal("w1", HistoryPositions, math.MaxUint64), 0, 0, "after"}, // after+1 would wrap around to the start
		{"after=" + seal.Seal("w2", HistoryPositions, 42), 0, 0, "after"},             // another workspace's
		{"after=" + seal.Seal("w1", InboxPositions, 42), 0, 0, "after"},               // a notification write's
		{"after=42", 0, 0, "after"}, // bare
		{"after=-1", 0, 0, "after"},
		{"after=x", 0, 0, "after"},
		{"$top=0", 0, 0, "$top"},
		{"$top=1001", 0, 0, "$top"},
	} {
		q, err := url.ParseQuery(tc.raw)
		if err != nil {
			t.Fatal(err)
		}
		after, limit, err := s.historyPage(q, c)
		var e *commands.Error
		switch {
		case tc.refused == "" && (err != nil || after != tc.after || limit != tc.limit):
			t.Errorf("%q: %d, %d, %v; want %d, %d", tc.raw, after, limit, err, tc.after, tc.limit)
		case tc.refused != "" && !(errors.As(err, &e) && len(e.Fields[tc.refused]) > 0):
			t.Errorf("%q: %v, want validationErrors.%s", tc.raw, err, tc.refused)
		}
	}
}

func TestParseDateTime(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"2027-10-01T00:00:00Z", true},
		{"2027-10-01T09:30:00.123456+02:00", true},
		{"2027-10-01T0:00:00+00:00", false}, // one-digit hour: time.Parse takes it
		{"2027-10-01T0:00:00Z", false},
		{"9090-10-08T23:51:27,000+00:00", false}, // a comma before the fraction: time.Parse takes it
		{"2027-10-01T00:00:00.Z", false},
		{"2027-10-01T00:00:00+0100", false},
		{"9999-12-31T23:59:59.99999+24:00", false}, // time.Parse takes it
		{"2027-10-01T00:00:00-23:59", true},
		{"2027-10-01T00:00:00+01:60", false},
		{"2027-10-01T00:00:00+0a:00", false},
		{"2027-10-01T00:00:00+01:00x", false},
		{"2027-10-01T24:00:00Z", false}, // the shape, but no such hour
		{"2027-10-01t00:00:00z", true},  // RFC 3339 allows it; Go's parse does not
		{"2027-10-01t09:30:00.5+02:00", true},
		{"2027-10-01T09:30:00.5+02:00z", false},
		{"2027-10-01", false},
		{"2027-10-01 00:00:00Z", false},
		{"", false},
	} {
		got, ok := parseDateTime(tc.in)
		if ok != tc.ok {
			t.Errorf("%q: ok %v, want %v", tc.in, ok, tc.ok)
		}
		if want, err := time.Parse(time.RFC3339Nano, strings.ToUpper(tc.in)); ok && (err != nil || !got.Equal(want)) {
			t.Errorf("%q: %v, want %v (%v)", tc.in, got, want, err)
		}
	}
}

// TestQueryError: a pair url.ParseQuery cannot read is refused under its
// parameter's name when that parses; dropped, the read would answer
// another question.
func TestQueryError(t *testing.T) {
	for _, tc := range []struct {
		raw     string
		ok      bool
		refused []string // the fields refused, sorted
	}{
		{"$filter=date%20eq%202099-01-01", true, nil},
		{"", true, nil},
		{"a=%3B&b=%25", true, nil},
		{"$filter=date%20eq%202099-01-01;", false, []string{"$filter"}},
		{"$filter=x%zz", false, []string{"$filter"}},
		{"asOf=2000-01-01T00:00:00Z%", false, []string{"asOf"}},
		{"SenderId=nobody%&$top=1;", false, []string{"$top", "senderId"}},
		{"params[$filter]=a;b", false, []string{"$filter"}},
		{"%zz=1", false, nil}, // no name to give: the message says it
		{"a;b=1", false, nil},
	} {
		err := queryError(tc.raw)
		if tc.ok {
			if err != nil {
				t.Errorf("%q: %v", tc.raw, err)
			}
			continue
		}
		var e *commands.Error
		if !errors.As(err, &e) || e.Code != commands.EInvalid || e.Message == "" {
			t.Fatalf("%q: %v, want a validation error", tc.raw, err)
		}
		var got []string
		for field := range e.Fields {
			got = append(got, field)
		}
		slices.Sort(got)
		if !reflect.DeepEqual(got, tc.refused) {
			t.Errorf("%q: refused %v, want %v", tc.raw, got, tc.refused)
		}
	}
}
