package storable_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"astro/commands"
	"astro/commands/storable"
	"astro/projections/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// cases are documents with the field Check must refuse ("" when it must
// accept them). strict marks a refusal of what PostgreSQL 15 takes: beyond a
// double's range, or an exponent beyond 1000 (which PostgreSQL 14 refuses).
var cases = []struct {
	doc    string
	field  string
	strict bool
}{
	{`{"data":{"x":"\ud800"}}`, "data", false},
	{`{"data":{"x":"\udc00"}}`, "data", false},
	{`{"data":{"x":"\ud800\u0041"}}`, "data", false},
	{`{"data":{"x":"\ud800\ud800"}}`, "data", false},
	{`{"data":{"x":"\ud83d\ude00"}}`, "", false},
	{`{"data":{"x":"😀 é"}}`, "", false},
	{"{\"subject\":\"a\xffb\"}", "subject", false},
	{"{\"subject\":\"\xc3\"}", "subject", false},
	{"{\"subject\":\"\xed\xa0\x80\"}", "subject", false}, // a surrogate encoded in UTF-8
	{`{"message":"a\u0000b"}`, "message", false},
	{`{"data":{"\ud800":1}}`, "data", false},
	{`{"data":{"x":1e999999}}`, "data", false},
	{`{"data":{"x":1e1001}}`, "data", true},
	{`{"data":{"x":1e1000}}`, "data", true},
	{`{"data":{"x":1.7976931348623157e308}}`, "", false},
	{`{"data":{"x":-1.8e308}}`, "data", true},
	{`{"data":{"x":1e-400}}`, "", false},
	{`{"data":{"x":-1E-1000}}`, "", false},
	{`{"data":{"x":1e-1001}}`, "data", true},
	{`{"data":{"x":0.` + strings.Repeat("0", 10000) + `1e1000}}`, "", false},
	{`{"data":{"x":` + strings.Repeat("9", 131072) + `}}`, "data", true},
	{`{"data":{"x":` + strings.Repeat("9", 131073) + `}}`, "data", false},
	{`{"data":{"x":0e-16384}}`, "data", false},
	{`{"data":{"x":1e` + strings.Repeat("9", 250000) + `}}`, "data", false},
	{`{"data":{"x":1e-0000000000000000001}}`, "", false},
	{`{"data":{"x":1E+0000000000000000300}}`, "", false},
	{`{"data":{"x":1e99999999999999999999999}}`, "data", false},
	{`{"data":{"x":0.` + strings.Repeat("1", 16383) + `}}`, "", false},
	{`{"data":{"x":0.` + strings.Repeat("1", 16384) + `}}`, "data", false},
	{`{"data":{"x":0.` + strings.Repeat("1", 16000) + `e-383}}`, "", false},
	{`{"data":{"x":0.` + strings.Repeat("1", 16000) + `e-384}}`, "data", false},
	{`{"data":{"x":1,"x":2}}`, "data", false},
	{`{"data":{"x":1,"\u0078":2}}`, "data", false},
	{`{"data":[{"a":1},{"a":2}]}`, "", false},
	{`{"subject":"a","subject":"b"}`, "subject", false},
	{`{"data":{"a":{"b":[1,{"c":"\udfff"}]}}}`, "data", false},
	{`{"a":"\"\\\/\b\f\n\r\t"}`, "", false},
	{`{"data":{"x":-0.5e+3,"y":[true,false,null],"z":{}}}`, "", false},
}

func TestCheck(t *testing.T) {
	for _, c := range cases {
		problems := storable.Check([]byte(c.doc))
		switch {
		case c.field == "" && len(problems) > 0:
			t.Errorf("%.80q: refused %v, want accepted", c.doc, problems)
		case c.field != "" && (len(problems) != 1 || problems[0].Field != c.field):
			t.Errorf("%.80q: problems %v, want one on %q", c.doc, problems, c.field)
		}
	}
}

// TestCheckAgreesWithPostgreSQL holds Check to the read model itself: what
// Check accepts, jsonb stores and gives back equal; what it refuses,
// PostgreSQL refuses or changes (keeps one of duplicate keys).
func TestCheckAgreesWithPostgreSQL(t *testing.T) {
	db := pgtest.Open(t)
	ctx := context.Background()
	for _, c := range cases {
		var back string
		err := db.QueryRowContext(ctx, `SELECT $1::jsonb::text`, c.doc).Scan(&back)
		accepted := len(storable.Check([]byte(c.doc))) == 0
		switch {
		case accepted && err != nil:
			t.Errorf("%.80q: Check accepts, PostgreSQL refuses: %v", c.doc, err)
		case accepted:
			var equal bool
			if err := db.QueryRowContext(ctx, `SELECT $1::jsonb = $2::jsonb`, c.doc, back).Scan(&equal); err != nil || !equal {
				t.Errorf("%.80q: PostgreSQL gives back %.80q", c.doc, back)
			}
		case err == nil && !c.strict && !strings.Contains(c.doc, `":1,"`) && !strings.Contains(c.doc, `"subject":"a","subject"`):
			t.Errorf("%.80q: Check refuses, PostgreSQL takes it as %.80q", c.doc, back)
		}
	}
}

func TestErrKeysProblemsByPlainFieldNames(t *testing.T) {
	tests := []struct {
		doc, field string
	}{
		{`{"subject":"\ud800"}`, "subject"},
		{`{"00.0":{"":"\ud800"}}`, "body"},
		{`{"a b":"\u0000"}`, "body"},
	}
	for _, tt := range tests {
		var e *commands.Error
		if err := storable.Err([]byte(tt.doc)); !errors.As(err, &e) || len(e.Fields[tt.field]) != 1 || len(e.Fields) != 1 {
			t.Errorf("%s: %v, want one problem under %q", tt.doc, err, tt.field)
		}
	}
	if err := storable.Err([]byte(`{"subject":"fine"}`)); err != nil {
		t.Errorf("a storable document: %v", err)
	}
}

// TestErrRefusesKeysThatNameOneField: encoding/json reads a body's field
// names in any case and keeps the last of two that differ only in case, so
// {"recipientId":"alice","RECIPIENTID":"mallory"} went to mallory while
// anything that checked the first spelling saw alice.
func TestErrRefusesKeysThatNameOneField(t *testing.T) {
	for _, tt := range []struct {
		doc, field string // field "": accepted
	}{
		{`{"reason":"a","REASON":"b"}`, "REASON"},
		{`{"recipientId":"alice","subject":"s","RECIPIENTID":"mallory"}`, "RECIPIENTID"},
		{`{"kind":"a","\u212aind":"b"}`, "body"}, // the Kelvin sign folds to k, as encoding/json reads it
		{`{"reason":"a","resources":[],"type":"global"}`, ""},
		{`{"data":{"taskId":"x","TASKID":"y"},"reason":"a"}`, ""}, // data's own names are the send's to check
	} {
		err := storable.Err([]byte(tt.doc))
		var e *commands.Error
		switch {
		case tt.field == "" && err != nil:
			t.Errorf("%s: %v, want accepted", tt.doc, err)
		case tt.field != "" && (!errors.As(err, &e) || len(e.Fields[tt.field]) != 1):
			t.Errorf("%s: %v, want one problem under %q", tt.doc, err, tt.field)
		}
	}
}
