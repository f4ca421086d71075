package odata

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

var testSchema = Schema{
	"date":      {Column: "d.day", Kind: Date},
	"countryId": {Column: "h.country_id", Kind: String},
	"name":      {Column: "h.name", Kind: String},
	"id":        {Column: "h.id", Kind: UUID},
	"count":     {Column: "h.n", Kind: Int},
	"public":    {Column: "h.public", Kind: Bool},
	"ref": {Column: "h.ref", Kind: String, LiteralHint: "a reference, not {braced}", Literal: func(s string) (string, bool) {
		switch {
		case s == "same":
			return s, true // no other value
		case strings.HasPrefix(s, "{"):
			return "", false
		}
		return "named " + s, true
	}},
}

var testOptions = Options{DefaultTop: 50, MaxTop: 200}

type input struct{ filter, orderby, top, skip string }

var parseCases = []struct {
	name  string
	in    input
	opt   Options
	where string
	args  []any
	order string
	top   int
	skip  int
}{
	{name: "all absent", top: 50},
	{name: "blank is absent", in: input{" \t", "  ", " ", ""}, top: 50},
	{name: "brief example",
		in:    input{filter: "date ge 2027-01-01 and countryId eq 'GB'"},
		where: "d.day >= $1 AND h.country_id = $2", args: []any{"2027-01-01", "GB"}, top: 50},
	{name: "operators and case",
		in:    input{filter: "count EQ 1 or count ne 2 or count Gt 3 or count ge -4 or count lt 5 or count le 6"},
		where: "h.n = $1 OR (h.n <> $2 OR h.n IS NULL) OR h.n > $3 OR h.n >= $4 OR h.n < $5 OR h.n <= $6",
		args:  []any{int64(1), int64(2), int64(3), int64(-4), int64(5), int64(6)}, top: 50},
	{name: "field names are case-insensitive",
		in:    input{filter: "COUNTRYID eq 'gb'"},
		where: "h.country_id = $1", args: []any{"gb"}, top: 50},
	{name: "and binds tighter than or",
		in:    input{filter: "name eq 'a' or name eq 'b' and count eq 1"},
		where: "h.name = $1 OR h.name = $2 AND h.n = $3", args: []any{"a", "b", int64(1)}, top: 50},
	{name: "parentheses kept where needed, dropped where not",
		in:    input{filter: "((name eq 'a' or name eq 'b')) and (count eq 1)"},
		where: "(h.name = $1 OR h.name = $2) AND h.n = $3", args: []any{"a", "b", int64(1)}, top: 50},
	{name: "not pushed down",
		in:    input{filter: "not (name eq 'a' or count gt 2)"},
		where: "(h.name <> $1 OR h.name IS NULL) AND (h.n <= $2 OR h.n IS NULL)", args: []any{"a", int64(2)}, top: 50},
	{name: "double not cancels",
		in:    input{filter: "not not name ne 'a'"},
		where: "(h.name <> $1 OR h.name IS NULL)", args: []any{"a"}, top: 50},
	{name: "not of ne",
		in:    input{filter: "not name ne 'a'"},
		where: "h.name = $1", args: []any{"a"}, top: 50},
	{name: "not of and inside and",
		in:    input{filter: "count eq 1 and not (count eq 2 and count eq 3)"},
		where: "h.n = $1 AND ((h.n <> $2 OR h.n IS NULL) OR (h.n <> $3 OR h.n IS NULL))",
		args:  []any{int64(1), int64(2), int64(3)}, top: 50},
	{name: "null",
		in:    input{filter: "countryId eq null or name ne NULL or not (date eq null)"},
		where: "h.country_id IS NULL OR h.name IS NOT NULL OR d.day IS NOT NULL", top: 50},
	{name: "literal on the left flips the operator",
		in:    input{filter: "2027-01-01 lt date and 'GB' eq countryId and null ne name"},
		where: "d.day > $1 AND h.country_id = $2 AND h.name IS NOT NULL", args: []any{"2027-01-01", "GB"}, top: 50},
	{name: "quoted date, escaped quote, bool, uuid",
		in:    input{filter: "date le '2028-02-29' and name eq 'O''Brien' and public eq TRUE and id eq '123E4567-e89b-12d3-a456-426614174000'"},
		where: "d.day <= $1 AND h.name = $2 AND h.public = $3 AND h.id = $4",
		args:  []any{"2028-02-29", "O'Brien", true, "123e4567-e89b-12d3-a456-426614174000"}, top: 50},
	{name: "an unquoted guid, as OData v4 writes it, is an id or text",
		in:    input{filter: "id eq 01A21835-2ddb-4c8b-9c1a-1b2c3d4e5f60 or 01a21835-2ddb-4c8b-9c1a-1b2c3d4e5f60 ne id or name eq 01a21835-2ddb-4c8b-9c1a-1b2c3d4e5f60"},
		where: "h.id = $1 OR (h.id <> $2 OR h.id IS NULL) OR h.name = $3",
		args:  []any{"01a21835-2ddb-4c8b-9c1a-1b2c3d4e5f60", "01a21835-2ddb-4c8b-9c1a-1b2c3d4e5f60", "01a21835-2ddb-4c8b-9c1a-1b2c3d4e5f60"}, top: 50},
	{name: "an unquoted guid where a literal stands for two values",
		in:    input{filter: "ref eq abcdef12-2ddb-4c8b-9c1a-1b2c3d4e5f60"},
		where: "h.ref = $1 OR h.ref = $2", args: []any{"abcdef12-2ddb-4c8b-9c1a-1b2c3d4e5f60", "named abcdef12-2ddb-4c8b-9c1a-1b2c3d4e5f60"}, top: 50},
	{name: "a literal that stands for two values: eq either",
		in:    input{filter: "ref eq 'bob' and 'bob' eq ref"},
		where: "(h.ref = $1 OR h.ref = $2) AND (h.ref = $3 OR h.ref = $4)",
		args:  []any{"bob", "named bob", "bob", "named bob"}, top: 50},
	{name: "a literal that stands for two values: ne neither, not eq neither",
		in:    input{filter: "ref ne 'bob' or not (ref eq 'x')"},
		where: "(h.ref <> $1 OR h.ref IS NULL) AND (h.ref <> $2 OR h.ref IS NULL) OR (h.ref <> $3 OR h.ref IS NULL) AND (h.ref <> $4 OR h.ref IS NULL)",
		args:  []any{"bob", "named bob", "x", "named x"}, top: 50},
	{name: "a literal that stands for two values, in equality only",
		in:    input{filter: "ref gt 'a' or ref eq null or ref eq 'same'"},
		where: "h.ref > $1 OR h.ref IS NULL OR h.ref = $2", args: []any{"a", "same"}, top: 50},
	{name: "a literal that stands for two values, numbered after the others",
		in: input{filter: "name eq 'a' and ref eq 'b' and count eq 1"}, opt: Options{ArgOffset: 1},
		where: "h.name = $2 AND (h.ref = $3 OR h.ref = $4) AND h.n = $5", args: []any{"a", "b", "named b", int64(1)}, top: 100},
	{name: "a date and time at midnight is its date, in its own offset",
		in:    input{filter: "date ge 2027-01-02T00:00:00Z and date lt 2027-02-01T00:00:00.000-05:00 or date eq 2027-03-01T00:00:00 or date ne '2027-03-02T00:00+02:00'"},
		where: "d.day >= $1 AND d.day < $2 OR d.day = $3 OR (d.day <> $4 OR d.day IS NULL)",
		args:  []any{"2027-01-02", "2027-02-01", "2027-03-01", "2027-03-02"}, top: 50},
	{name: "a date and time later in the day orders after its date",
		in:    input{filter: "date ge 2027-01-02T10:00:00Z and date gt 2027-01-03T00:00:01+14:00 and date le 2027-01-31T23:59:59.999Z and date lt 2027-02-01T12:00:00"},
		where: "d.day > $1 AND d.day > $2 AND d.day <= $3 AND d.day <= $4",
		args:  []any{"2027-01-02", "2027-01-03", "2027-01-31", "2027-02-01"}, top: 50},
	{name: "a later time of day, negated and on the left",
		in:    input{filter: "not (date ge 2027-01-02T10:00:00Z) or 2027-01-05T08:00:00Z lt date"},
		where: "(d.day <= $1 OR d.day IS NULL) OR d.day > $2", args: []any{"2027-01-02", "2027-01-05"}, top: 50},
	{name: "OData v2's typed literals",
		in:    input{filter: "date ge datetime'2027-01-02T00:00:00' and date le DateTimeOffset'2027-02-01T00:00:00Z' and id eq guid'123E4567-e89b-12d3-a456-426614174000' and date ne date'2027-01-09'"},
		where: "d.day >= $1 AND d.day <= $2 AND h.id = $3 AND (d.day <> $4 OR d.day IS NULL)",
		args:  []any{"2027-01-02", "2027-02-01", "123e4567-e89b-12d3-a456-426614174000", "2027-01-09"}, top: 50},
	{name: "whitespace tolerant",
		in:    input{filter: "\t(date  ge\t2027-01-01)\r\nand(name eq'x')"},
		where: "d.day >= $1 AND h.name = $2", args: []any{"2027-01-01", "x"}, top: 50},
	{name: "text holding keywords and sql",
		in:    input{filter: "name eq 'a'' or 1=1; drop table x --'"},
		where: "h.name = $1", args: []any{"a' or 1=1; drop table x --"}, top: 50},
	{name: "arg offset",
		in: input{filter: "name eq 'a' and count eq 2"}, opt: Options{ArgOffset: 3},
		where: "h.name = $4 AND h.n = $5", args: []any{"a", int64(2)}, top: 100},
	{name: "orderby",
		in:    input{orderby: " date desc,Name,  countryId ASC "},
		order: "d.day DESC, h.name ASC, h.country_id ASC", top: 50},
	{name: "top and skip",
		in:  input{top: "200", skip: " 1000000 "},
		top: 200, skip: 1000000},
	{name: "top zero", in: input{top: "0"}, top: 0},
	{name: "zero options use defaults", opt: Options{}, in: input{top: "1000"}, top: 1000},
	{name: "default top capped by max", opt: Options{DefaultTop: 500, MaxTop: 20}, top: 20},
}

func TestParse(t *testing.T) {
	for _, c := range parseCases {
		t.Run(c.name, func(t *testing.T) {
			opt := c.opt
			if opt == (Options{}) && c.name != "zero options use defaults" {
				opt = testOptions
			}
			q, err := Parse(c.in.filter, c.in.orderby, c.in.top, c.in.skip, testSchema, opt)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			want := Query{Where: c.where, OrderBy: c.order, Args: c.args, Top: c.top, Skip: c.skip}
			if !reflect.DeepEqual(q, want) {
				t.Errorf("got  %#v\nwant %#v", q, want)
			}
		})
	}
}

var errorCases = []struct {
	name string
	in   input
	want Error
}{
	{"unknown field", input{filter: "date ge 2027-01-01 and cuntryId eq 'GB'"},
		Error{"$filter", 24, `unknown field "cuntryId"`}},
	{"date against text", input{filter: "date eq 'abc'"},
		Error{"$filter", 9, `"date" is a date: use the form 2027-01-31, found text "'abc'"`}},
	{"impossible date", input{filter: "date eq 2027-02-29"},
		Error{"$filter", 9, `"date" is a date: use the form 2027-01-31, found "2027-02-29"`}},
	{"year zero", input{filter: "date eq 0000-01-01"},
		Error{"$filter", 9, `"date" is a date: use the form 2027-01-31, found "0000-01-01"`}},
	{"date and time not a date", input{filter: "date ge 2027-01-32T00:00:00Z"},
		Error{"$filter", 9, `"date" is a date: use the form 2027-01-31, found "2027-01-32T00:00:00Z"`}},
	{"date and time with junk", input{filter: "date ge 2027-01-02Tnoon"},
		Error{"$filter", 9, `"date" is a date: use the form 2027-01-31, found "2027-01-02Tnoon"`}},
	{"date equal to a later time of day", input{filter: "date eq 2027-01-02T10:00:00Z"},
		Error{"$filter", 9, `"date" is a date: compared with eq or ne, a time must be midnight (2027-01-31T00:00:00Z), found "2027-01-02T10:00:00Z"`}},
	{"date not equal to a later time of day", input{filter: "date ne '2027-01-02T00:00:00.5Z'"},
		Error{"$filter", 9, `"date" is a date: compared with eq or ne, a time must be midnight (2027-01-31T00:00:00Z), found text "'2027-01-02T00:00:00.5Z'"`}},
	{"typed literal apart from its text", input{filter: "date ge datetime '2027-01-02'"},
		Error{"$filter", 9, `unknown field "datetime"`}},
	{"a literal refused", input{filter: "ref eq 'a' or ref gt '{b}'"},
		Error{"$filter", 22, `"ref" is a reference, not {braced}, found text "'{b}'"`}},
	{"unquoted text", input{filter: "countryId eq GB"},
		Error{"$filter", 14, `unknown field "GB"`}},
	{"number for text", input{filter: "countryId eq 44"},
		Error{"$filter", 14, `"countryId" is text: put the value in single quotes, e.g. 'abc'`}},
	{"text for number", input{filter: "count eq '1'"},
		Error{"$filter", 10, `"count" is a whole number, found text "'1'"`}},
	{"number out of range", input{filter: "count eq 99999999999999999999"},
		Error{"$filter", 10, `"count" is a whole number from -2147483648 to 2147483647, found "99999999999999999999"`}},
	{"number past 32 bits", input{filter: "count gt -2147483649"},
		Error{"$filter", 10, `"count" is a whole number from -2147483648 to 2147483647, found "-2147483649"`}},
	{"bad uuid", input{filter: "id eq 'nope'"},
		Error{"$filter", 7, `"id" is an id: use the form '123e4567-e89b-12d3-a456-426614174000', found text "'nope'"`}},
	{"unquoted uuid too short", input{filter: "id eq 01a21835-2ddb-4c8b-9c1a-1b2c3d4e5f6"},
		Error{"$filter", 7, `"id" is an id: use the form '123e4567-e89b-12d3-a456-426614174000', found "01a21835-2ddb-4c8b-9c1a-1b2c3d4e5f6"`}},
	{"unquoted word for text", input{filter: "name eq 1a2b"},
		Error{"$filter", 9, `"name" is text: put the value in single quotes, e.g. 'abc'`}},
	{"unquoted uuid for a number", input{filter: "count eq 01a21835-2ddb-4c8b-9c1a-1b2c3d4e5f60"},
		Error{"$filter", 10, `"count" is a whole number, found "01a21835-2ddb-4c8b-9c1a-1b2c3d4e5f60"`}},
	{"bool ordering", input{filter: "public gt false"},
		Error{"$filter", 11, `"public" can only be compared with eq or ne`}},
	{"bool needs keyword", input{filter: "public eq 1"},
		Error{"$filter", 11, `"public" is true or false, found "1"`}},
	{"null ordering", input{filter: "date gt null"},
		Error{"$filter", 9, "null can only be compared with eq or ne"}},
	{"missing operator", input{filter: "date 2027-01-01"},
		Error{"$filter", 6, `expected an operator (eq, ne, gt, ge, lt, le) after "date", found "2027-01-01"`}},
	{"missing value", input{filter: "date ge "},
		Error{"$filter", 9, `expected a field or a value after "ge", found the end`}},
	{"keyword as value", input{filter: "date ge and"},
		Error{"$filter", 9, `expected a field or a value after "ge", found "and"`}},
	{"two fields", input{filter: "name eq countryId"},
		Error{"$filter", 9, `comparing two fields is not supported; compare "name" with a value`}},
	{"two literals", input{filter: "1 eq 1"},
		Error{"$filter", 1, "a comparison needs a field on one side"}},
	{"function", input{filter: "contains(name, 'a')"},
		Error{"$filter", 1, `functions such as "contains()" are not supported`}},
	{"unclosed paren", input{filter: "(name eq 'a'"},
		Error{"$filter", 13, `expected ")" to close the "(" at position 1, found the end`}},
	{"stray paren", input{filter: "name eq 'a')"},
		Error{"$filter", 12, `")" has no matching "("`}},
	{"empty parens", input{filter: "()"},
		Error{"$filter", 2, `expected a field or a value here, found ")"`}},
	{"trailing junk", input{filter: "name eq 'a' name"},
		Error{"$filter", 13, `expected and, or, or the end, found "name"`}},
	{"dangling and", input{filter: "name eq 'a' and"},
		Error{"$filter", 16, `expected a field or a value here, found the end`}},
	{"unterminated text", input{filter: "name eq 'it''s"},
		Error{"$filter", 9, "text starting here is missing its closing quote '"}},
	{"invalid utf8", input{filter: "name eq '\xff'"},
		Error{"$filter", 9, "text contains invalid characters"}},
	{"nul byte", input{filter: "name eq 'a\x00'"},
		Error{"$filter", 9, "text contains invalid characters"}},
	{"comma in filter", input{filter: "name eq 'a', name eq 'b'"},
		Error{"$filter", 12, `expected and, or, or the end, found ","`}},
	{"too long", input{filter: strings.Repeat(" ", MaxLen) + "x"}, Error{"$filter", 0, "is longer than 2000 bytes"}},
	{"too deep", input{filter: strings.Repeat("(", MaxDepth+1) + "name eq 'a'" + strings.Repeat(")", MaxDepth+1)}, Error{"$filter", 33, "nested more than 32 levels deep"}},
	{"too deep with not", input{filter: strings.Repeat("not ", 40) + "name eq 'a'"},
		Error{"$filter", 129, "nested more than 32 levels deep"}},
	{"too many comparisons", input{filter: "name eq 'a'" + strings.Repeat(" or name eq 'a'", MaxComparisons)},
		Error{"$filter", 1 + len("name eq 'a'") + 4 + (MaxComparisons-1)*len(" or name eq 'a'"), "more than 100 comparisons"}},
	{"long word is cut in message", input{filter: strings.Repeat("x", 60) + " eq 'a'"},
		Error{"$filter", 1, `unknown field "` + strings.Repeat("x", 40) + `…"`}},

	{"orderby unknown", input{orderby: "date, nope desc"}, Error{"$orderby", 7, `unknown field "nope"`}},
	{"orderby bad direction", input{orderby: "date up"}, Error{"$orderby", 6, `expected asc or desc, found "up"`}},
	{"orderby missing comma", input{orderby: "date asc name"}, Error{"$orderby", 10, `expected a comma, found "name"`}},
	{"orderby empty item", input{orderby: "date,,name"}, Error{"$orderby", 6, `expected a field name, found ","`}},
	{"orderby trailing comma", input{orderby: "date,"}, Error{"$orderby", 6, "expected a field name, found the end"}},
	{"orderby twice", input{orderby: "date,DATE desc"}, Error{"$orderby", 6, `field "DATE" is listed twice`}},
	{"orderby too many", input{orderby: "date,name,countryId,id,count,public,a,b,c"},
		Error{"$orderby", 37, `unknown field "a"`}},
	{"orderby text", input{orderby: "'date'"}, Error{"$orderby", 1, `expected a field name, found text "'date'"`}},

	{"top too big", input{top: "201"}, Error{"$top", 0, "must be at most 200"}},
	{"top huge", input{top: "99999999999999999999999999"}, Error{"$top", 0, "must be at most 200"}},
	{"top negative", input{top: "-1"}, Error{"$top", 0, "must be a whole number from 0 to 200"}},
	{"top not a number", input{top: "1e3"}, Error{"$top", 0, "must be a whole number from 0 to 200"}},
	{"top plus", input{top: "+5"}, Error{"$top", 0, "must be a whole number from 0 to 200"}},
	{"skip too big", input{skip: "1000001"}, Error{"$skip", 0, "must be at most 1000000"}},
	{"skip negative", input{skip: "-5"}, Error{"$skip", 0, "must be a whole number from 0 to 1000000"}},
}

func TestParseErrors(t *testing.T) {
	for _, c := range errorCases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.in.filter, c.in.orderby, c.in.top, c.in.skip, testSchema, testOptions)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v, want *Error", err)
			}
			if *e != c.want {
				t.Errorf("got  %#v\nwant %#v", *e, c.want)
			}
		})
	}
}

func TestTooManyOrderBy(t *testing.T) {
	s := Schema{}
	var items []string
	for i := range MaxOrderBy + 1 {
		n := "f" + strconv.Itoa(i)
		s[n] = Field{Column: "t." + n}
		items = append(items, n)
	}
	if _, err := Parse("", strings.Join(items[:MaxOrderBy], ","), "", "", s, Options{}); err != nil {
		t.Fatalf("%d items: %v", MaxOrderBy, err)
	}
	_, err := Parse("", strings.Join(items, ","), "", "", s, Options{})
	want := "$orderby: position 25: at most 8 fields can be sorted on"
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}

func TestErrorString(t *testing.T) {
	cases := []struct {
		e    Error
		want string
	}{
		{Error{"$filter", 17, `unknown field "cuntryId"`}, `$filter: position 17: unknown field "cuntryId"`},
		{Error{"$top", 0, "must be at most 200"}, "$top: must be at most 200"},
	}
	for _, c := range cases {
		if got := c.e.Error(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}

func TestSchemaLookup(t *testing.T) {
	s := Schema{
		"date": {Column: "a.lower"}, "Date": {Column: "a.upper"},
		"countryId": {Column: "c.id"},
		"odd":       {Column: "o.x", Kind: Kind(99)},
	}
	cases := []struct {
		filter string
		where  string
		err    string
	}{
		{filter: "date eq 'x'", where: "a.lower = $1"},
		{filter: "Date eq 'x'", where: "a.upper = $1"},
		{filter: "countryid eq 'x'", where: "c.id = $1"},
		{filter: "DATE eq 'x'", err: `$filter: position 1: unknown field "DATE"`},
		{filter: "odd eq 1", err: `$filter: position 8: "odd" cannot be filtered on`},
	}
	for _, c := range cases {
		q, err := Parse(c.filter, "", "", "", s, Options{})
		if got := fmt.Sprint(err); c.err != "" && got != c.err {
			t.Errorf("%q: got error %v, want %s", c.filter, err, c.err)
		}
		if c.err == "" && (err != nil || q.Where != c.where) {
			t.Errorf("%q: got %q, %v; want %q", c.filter, q.Where, err, c.where)
		}
	}
}
