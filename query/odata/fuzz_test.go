package odata

import (
	"errors"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParse checks the safety promise: whatever the input, Parse does not
// panic, and the SQL it returns is built only from schema columns, fixed
// keywords and placeholders, so no byte of user input can reach it.
func FuzzParse(f *testing.F) {
	for _, c := range parseCases {
		f.Add(c.in.filter, c.in.orderby, c.in.top, c.in.skip)
	}
	for _, c := range errorCases {
		f.Add(c.in.filter, c.in.orderby, c.in.top, c.in.skip)
	}
	opt := Options{DefaultTop: 10, MaxTop: 100, ArgOffset: 2}
	// Longest first so "h.name" is not read as "h.n" + "ame".
	var cols []string
	for _, fl := range testSchema {
		cols = append(cols, fl.Column)
	}
	sort.Slice(cols, func(i, j int) bool { return len(cols[i]) > len(cols[j]) })

	f.Fuzz(func(t *testing.T, filter, orderby, top, skip string) {
		q, err := Parse(filter, orderby, top, skip, testSchema, opt)
		if err != nil {
			checkError(t, err, map[string]string{"$filter": filter, "$orderby": orderby, "$top": top, "$skip": skip})
			return
		}
		checkWhere(t, q, cols, opt.ArgOffset)
		checkOrderBy(t, q.OrderBy, cols)
		if q.Top < 0 || q.Top > opt.MaxTop || q.Skip < 0 || q.Skip > MaxSkip {
			t.Errorf("paging out of range: top %d skip %d", q.Top, q.Skip)
		}
		again, _ := Parse(filter, orderby, top, skip, testSchema, opt)
		if !reflect.DeepEqual(q, again) {
			t.Errorf("not deterministic:\n%#v\n%#v", q, again)
		}
	})
}

func checkError(t *testing.T, err error, values map[string]string) {
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v is not *Error", err)
	}
	v, ok := values[e.Option]
	if !ok {
		t.Fatalf("unknown option in %#v", e)
	}
	if e.Pos < 0 || e.Pos > len(v)+1 || e.Msg == "" || !utf8.ValidString(e.Msg) {
		t.Errorf("bad error %#v for %q", e, v)
	}
}

// sqlWords is everything besides columns and $N that Where may contain.
var sqlWords = map[string]bool{
	"AND": true, "OR": true, "IS": true, "NOT": true, "NULL": true,
	"=": true, "<>": true, ">": true, ">=": true, "<": true, "<=": true,
}

func checkWhere(t *testing.T, q Query, cols []string, offset int) {
	t.Helper()
	depth, next := 0, offset+1
	for rest := q.Where; rest != ""; {
		switch rest[0] {
		case ' ':
			rest = rest[1:]
			continue
		case '(':
			depth++
			rest = rest[1:]
			continue
		case ')':
			if depth--; depth < 0 {
				t.Fatalf("unbalanced ) in %q", q.Where)
			}
			rest = rest[1:]
			continue
		}
		word := rest
		if i := strings.IndexAny(rest, " ()"); i >= 0 {
			word = rest[:i]
		}
		if col := matchColumn(rest, cols); col != "" {
			rest = rest[len(col):]
			continue
		}
		switch {
		case sqlWords[word]:
		case word == "$"+strconv.Itoa(next):
			next++
		default:
			t.Fatalf("unexpected %q in %q", word, q.Where)
		}
		rest = rest[len(word):]
	}
	if depth != 0 {
		t.Fatalf("unbalanced ( in %q", q.Where)
	}
	// Placeholders are numbered in order of appearance, one per arg; a
	// repeated column in "OR c IS NULL" must not repeat one.
	if got := next - offset - 1; got != len(q.Args) {
		t.Fatalf("%d placeholders, %d args in %q", got, len(q.Args), q.Where)
	}
	for _, a := range q.Args {
		switch a.(type) {
		case string, int64, bool:
		default:
			t.Fatalf("arg %#v has unexpected type", a)
		}
	}
}

func matchColumn(s string, cols []string) string {
	for _, c := range cols {
		if strings.HasPrefix(s, c) && (len(s) == len(c) || s[len(c)] == ' ') {
			return c
		}
	}
	return ""
}

func checkOrderBy(t *testing.T, orderBy string, cols []string) {
	t.Helper()
	if orderBy == "" {
		return
	}
	for item := range strings.SplitSeq(orderBy, ", ") {
		col, dir, ok := strings.Cut(item, " ")
		if !ok || matchColumn(col, cols) != col || (dir != "ASC" && dir != "DESC") {
			t.Fatalf("unexpected item %q in %q", item, orderBy)
		}
	}
}
