// Package odata owns the translation of OData-style list options ($filter,
// $orderby, $top, $skip) into PostgreSQL fragments. The caller declares the
// fields a list exposes and the trusted SQL expression behind each; user input
// only ever reaches SQL as bind parameters.
//
// Comparisons follow OData's two-valued logic rather than SQL's: a field that
// is null never equals a value, but is "ne" to every value, so
// `countryId ne 'GB'` also matches rows without a country. The generated SQL
// therefore has no NOT: negations are pushed down to the comparisons, and
// those that must hold for null gain "OR column IS NULL".
package odata

import (
	"fmt"
	"strconv"
	"strings"
)

// Kind is the type of a field, which decides the literals it accepts.
type Kind int

const (
	String Kind = iota // 'quoted text'; the zero value so ids default to it
	Date               // 2027-01-01 or '2027-01-01', bound as that text
	Int                // whole number of 32 bits (an integer column), bound as int64
	Bool               // true/false, only eq/ne
	UUID               // 'quoted' 8-4-4-4-12 hex, bound lower-cased as text
)

func (k Kind) String() string {
	switch k {
	case String:
		return "string"
	case Date:
		return "date"
	case Int:
		return "int"
	case Bool:
		return "bool"
	case UUID:
		return "uuid"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Field maps a public field to SQL.
type Field struct {
	Column string // trusted SQL expression, e.g. "h.date_from"; never user input
	Kind   Kind
	// Alias, for an Int field, reads a quoted literal as the number it
	// names ('GB' for the country 826), so that a field whose values
	// clients know by two names can be filtered by either. Its message
	// says what the literal must be when it is none.
	Alias     func(string) (int64, bool)
	AliasHint string
	// Literal, for a String field, is another value a quoted literal
	// compared with eq or ne stands for: eq holds for either value, ne for
	// neither. It is how a field whose values clients name two ways is
	// compared by either name (a resource's id, stored as the UUID of the
	// name an upstream service gave it, or as that name itself when it
	// was stored before names were UUIDs). Returning the literal itself
	// means no other value; returning false refuses the literal, with
	// any operator, and LiteralHint says what it must be.
	Literal     func(string) (string, bool)
	LiteralHint string
}

// Schema is keyed by the public JSON field name; lookups are case-insensitive.
type Schema map[string]Field

// field matches exactly first so a schema may hold names differing only in
// case; a case-insensitive match counts only when it is unambiguous.
func (s Schema) field(name string) (Field, bool) {
	if f, ok := s[name]; ok {
		return f, true
	}
	var found Field
	n := 0
	for k, f := range s {
		if strings.EqualFold(k, name) {
			found, n = f, n+1
		}
	}
	return found, n == 1
}

// Query is the SQL-ready result of Parse.
type Query struct {
	Where   string // SQL boolean expression using $N placeholders, "" when no filter
	OrderBy string // e.g. "d.day ASC, h.id DESC", "" when none given
	Args    []any  // bind values for the placeholders, in order
	Top     int
	Skip    int
}

// Options bounds paging. Zero values pick the defaults below.
type Options struct {
	DefaultTop int // used when $top is absent; 0 means min(100, MaxTop)
	MaxTop     int // largest $top accepted; 0 means 1000
	ArgOffset  int // first placeholder is $ArgOffset+1; negative counts as 0
}

// Limits that keep parsing cheap whatever the input.
const (
	defaultTop     = 100
	defaultMaxTop  = 1000
	MaxSkip        = 1_000_000
	MaxLen         = 2000 // bytes, for $filter and $orderby each
	MaxDepth       = 32   // nested parentheses and "not"
	MaxComparisons = 100
	MaxOrderBy     = 8
)

// Error says which option is wrong, where, and why, in words fit for an end
// user. Pos is the 1-based byte offset in the option's value, or 0 when the
// whole value is at fault.
type Error struct {
	Option string // "$filter", "$orderby", "$top" or "$skip"
	Pos    int
	Msg    string
}

func (e *Error) Error() string {
	if e.Pos > 0 {
		return fmt.Sprintf("%s: position %d: %s", e.Option, e.Pos, e.Msg)
	}
	return e.Option + ": " + e.Msg
}

// Parse reads the four options as raw strings from the URL query; an empty or
// all-blank string means the option is absent. Errors are *Error.
func Parse(filter, orderby, top, skip string, s Schema, o Options) (Query, error) {
	maxTop := o.MaxTop
	if maxTop <= 0 {
		maxTop = defaultMaxTop
	}
	defTop := o.DefaultTop
	if defTop <= 0 {
		defTop = defaultTop
	}
	defTop = min(defTop, maxTop)

	var q Query
	var err error
	if q.Where, q.Args, err = parseFilter(filter, s, max(o.ArgOffset, 0)); err != nil {
		return Query{}, err
	}
	if q.OrderBy, err = parseOrderBy(orderby, s); err != nil {
		return Query{}, err
	}
	if q.Top, err = parseCount("$top", top, defTop, maxTop); err != nil {
		return Query{}, err
	}
	if q.Skip, err = parseCount("$skip", skip, 0, MaxSkip); err != nil {
		return Query{}, err
	}
	return q, nil
}

// parseCount accepts only plain digits: no sign, no exponent, no spaces inside.
func parseCount(option, raw string, def, max int) (int, error) {
	v := strings.TrimSpace(raw)
	if v == "" {
		return def, nil
	}
	n := 0
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, &Error{option, 0, "must be a whole number from 0 to " + strconv.Itoa(max)}
		}
		// Stop accumulating past max so huge inputs cannot overflow.
		if n <= max {
			n = n*10 + int(c-'0')
		}
	}
	if n > max {
		return 0, &Error{option, 0, "must be at most " + strconv.Itoa(max)}
	}
	return n, nil
}

// parseOrderBy reads `field [asc|desc]` items separated by commas.
func parseOrderBy(raw string, s Schema) (string, error) {
	const opt = "$orderby"
	if len(raw) > MaxLen {
		return "", &Error{opt, 0, fmt.Sprintf("is longer than %d bytes", MaxLen)}
	}
	toks, err := lex(opt, raw)
	if err != nil {
		return "", err
	}
	if len(toks) == 1 { // only EOF
		return "", nil
	}
	var out []string
	seen := map[string]bool{}
	for i := 0; ; {
		t := toks[i]
		if t.kind != tWord || !isIdent(t.text) {
			return "", &Error{opt, t.pos, "expected a field name, found " + describe(t)}
		}
		f, ok := s.field(t.text)
		if !ok {
			return "", &Error{opt, t.pos, "unknown field " + quote(t.text)}
		}
		if seen[f.Column] {
			return "", &Error{opt, t.pos, "field " + quote(t.text) + " is listed twice"}
		}
		seen[f.Column] = true
		if len(out) == MaxOrderBy {
			return "", &Error{opt, t.pos, fmt.Sprintf("at most %d fields can be sorted on", MaxOrderBy)}
		}
		i++
		dir := "ASC"
		if t := toks[i]; t.kind == tWord {
			switch strings.ToLower(t.text) {
			case "asc":
			case "desc":
				dir = "DESC"
			default:
				return "", &Error{opt, t.pos, "expected asc or desc, found " + describe(t)}
			}
			i++
		}
		out = append(out, f.Column+" "+dir)
		switch t := toks[i]; t.kind {
		case tEOF:
			return strings.Join(out, ", "), nil
		case tComma:
			i++
		default:
			return "", &Error{opt, t.pos, "expected a comma, found " + describe(t)}
		}
	}
}
