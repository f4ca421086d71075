package odata

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

type tokKind int

const (
	tEOF    tokKind = iota
	tWord           // identifier, keyword, number or unquoted date
	tString         // 'quoted', text holds the unescaped value
	tLParen
	tRParen
	tComma
)

type token struct {
	kind tokKind
	pos  int // 1-based byte offset
	text string
}

// lex splits the whole input up front; inputs are capped at MaxLen so the
// token slice stays small, and the parser gets cheap lookahead.
func lex(opt, s string) ([]token, error) {
	var toks []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case isSpace(c):
			i++
		case c == '(':
			toks = append(toks, token{tLParen, i + 1, "("})
			i++
		case c == ')':
			toks = append(toks, token{tRParen, i + 1, ")"})
			i++
		case c == ',':
			toks = append(toks, token{tComma, i + 1, ","})
			i++
		case c == '\'':
			start := i
			var b strings.Builder
			for i++; ; i++ {
				if i >= len(s) {
					return nil, &Error{opt, start + 1, "text starting here is missing its closing quote '"}
				}
				if s[i] == '\'' {
					if i+1 < len(s) && s[i+1] == '\'' {
						b.WriteByte('\'')
						i++
						continue
					}
					i++
					break
				}
				b.WriteByte(s[i])
			}
			v := b.String()
			// PostgreSQL rejects both in text values; say so here rather
			// than let the query fail as a server error.
			if !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
				return nil, &Error{opt, start + 1, "text contains invalid characters"}
			}
			toks = append(toks, token{tString, start + 1, v})
		default:
			start := i
			for i < len(s) && !isDelim(s[i]) {
				i++
			}
			toks = append(toks, token{tWord, start + 1, s[start:i]})
		}
	}
	return append(toks, token{tEOF, len(s) + 1, ""}), nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isDelim(c byte) bool {
	return isSpace(c) || c == '(' || c == ')' || c == ',' || c == '\''
}

func isIdent(w string) bool {
	for i := 0; i < len(w); i++ {
		c := w[i]
		letter := c == '_' || (c|0x20 >= 'a' && c|0x20 <= 'z')
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return w != ""
}

// describe names a token for an error message.
func describe(t token) string {
	switch t.kind {
	case tEOF:
		return "the end"
	case tString:
		return "text " + quote("'"+t.text+"'")
	}
	return quote(t.text)
}

// quote keeps messages short and printable whatever the user sent.
func quote(s string) string {
	const max = 40
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return strconv.Quote(s)
}

type cmpOp int

const (
	opEq cmpOp = iota
	opNe
	opGt
	opGe
	opLt
	opLe
)

var cmpOps = map[string]cmpOp{"eq": opEq, "ne": opNe, "gt": opGt, "ge": opGe, "lt": opLt, "le": opLe}

// sql, negate and swap are indexed by cmpOp.
var (
	cmpSQL    = [...]string{"=", "<>", ">", ">=", "<", "<="}
	cmpNegate = [...]cmpOp{opNe, opEq, opLe, opLt, opGe, opGt}
	cmpSwap   = [...]cmpOp{opEq, opNe, opLt, opLe, opGt, opGe} // for `literal op field`
)

type nodeKind int

const (
	nAnd nodeKind = iota
	nOr
	nNot
	nCmp
)

type node struct {
	kind nodeKind
	kids []*node
	// nCmp only; ph == "" means the literal was null.
	col string
	op  cmpOp
	ph  string
}

type parser struct {
	toks   []token
	i      int
	schema Schema
	args   []any
	offset int
	depth  int
	cmps   int
}

func parseFilter(raw string, s Schema, argOffset int) (string, []any, error) {
	if len(raw) > MaxLen {
		return "", nil, &Error{"$filter", 0, fmt.Sprintf("is longer than %d bytes", MaxLen)}
	}
	toks, err := lex("$filter", raw)
	if err != nil {
		return "", nil, err
	}
	if len(toks) == 1 {
		return "", nil, nil
	}
	p := &parser{toks: toks, schema: s, offset: argOffset}
	n, err := p.or()
	if err != nil {
		return "", nil, err
	}
	if t := p.peek(); t.kind != tEOF {
		if t.kind == tRParen {
			return "", nil, p.fail(t, `")" has no matching "("`)
		}
		return "", nil, p.fail(t, "expected and, or, or the end, found "+describe(t))
	}
	sql, _ := render(n, false)
	return sql, p.args, nil
}

func (p *parser) peek() token { return p.toks[p.i] }

func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

func (p *parser) keyword(kw string) bool {
	t := p.peek()
	return t.kind == tWord && strings.EqualFold(t.text, kw)
}

func (p *parser) fail(t token, msg string) error { return &Error{"$filter", t.pos, msg} }

// enter bounds recursion so hostile nesting yields an error, not a deep stack.
func (p *parser) enter(t token) error {
	p.depth++
	if p.depth > MaxDepth {
		return p.fail(t, fmt.Sprintf("nested more than %d levels deep", MaxDepth))
	}
	return nil
}

func (p *parser) or() (*node, error)  { return p.chain("or", nOr, p.and) }
func (p *parser) and() (*node, error) { return p.chain("and", nAnd, p.unary) }

// chain reads `sub (kw sub)*` into one flat node, which keeps long and/or
// lists from deepening the tree.
func (p *parser) chain(kw string, kind nodeKind, sub func() (*node, error)) (*node, error) {
	first, err := sub()
	if err != nil {
		return nil, err
	}
	if !p.keyword(kw) {
		return first, nil
	}
	n := &node{kind: kind, kids: []*node{first}}
	for p.keyword(kw) {
		p.next()
		k, err := sub()
		if err != nil {
			return nil, err
		}
		n.kids = append(n.kids, k)
	}
	return n, nil
}

func (p *parser) unary() (*node, error) {
	t := p.peek()
	switch {
	case t.kind == tWord && strings.EqualFold(t.text, "not"):
		if err := p.enter(t); err != nil {
			return nil, err
		}
		p.next()
		k, err := p.unary()
		if err != nil {
			return nil, err
		}
		p.depth--
		return &node{kind: nNot, kids: []*node{k}}, nil
	case t.kind == tLParen:
		if err := p.enter(t); err != nil {
			return nil, err
		}
		p.next()
		n, err := p.or()
		if err != nil {
			return nil, err
		}
		if c := p.next(); c.kind != tRParen {
			return nil, p.fail(c, fmt.Sprintf(`expected ")" to close the "(" at position %d, found %s`, t.pos, describe(c)))
		}
		p.depth--
		return n, nil
	}
	return p.comparison()
}

// operand is one side of a comparison: a schema field or a literal.
type operand struct {
	tok   token
	field *Field
	name  string
}

func (p *parser) operand(after string) (operand, error) {
	t := p.next()
	switch t.kind {
	case tString:
		return operand{tok: t}, nil
	case tWord:
		lw := strings.ToLower(t.text)
		if next := p.peek(); next.kind == tString && next.pos == t.pos+len(t.text) && typedLiterals[lw] {
			// OData v2's typed literals (datetime'2027-01-31T00:00:00',
			// guid'…'), which older clients still write: the text is the
			// value, and the field's kind decides what it must be.
			p.next()
			return operand{tok: token{tString, t.pos, next.text}}, nil
		}
		if isLiteralWord(lw) || !isIdent(t.text) {
			return operand{tok: t}, nil // true/false/null, a number or a date; bind checks it
		}
		if _, op := cmpOps[lw]; op || lw == "and" || lw == "or" || lw == "not" {
			break // reserved, so a schema field of that name is unreachable
		}
		if p.peek().kind == tLParen {
			return operand{}, p.fail(t, "functions such as "+quote(t.text+"()")+" are not supported")
		}
		f, ok := p.schema.field(t.text)
		if !ok {
			return operand{}, p.fail(t, "unknown field "+quote(t.text))
		}
		return operand{tok: t, field: &f, name: t.text}, nil
	}
	return operand{}, p.fail(t, "expected a field or a value "+after+", found "+describe(t))
}

var typedLiterals = map[string]bool{"datetime": true, "datetimeoffset": true, "date": true, "guid": true}

func isLiteralWord(w string) bool {
	switch strings.ToLower(w) {
	case "true", "false", "null":
		return true
	}
	return false
}

func (p *parser) comparison() (*node, error) {
	start := p.peek()
	left, err := p.operand("here")
	if err != nil {
		return nil, err
	}
	t := p.next()
	op, ok := cmpOps[strings.ToLower(t.text)]
	if t.kind != tWord || !ok {
		return nil, p.fail(t, "expected an operator (eq, ne, gt, ge, lt, le) after "+quote(left.tok.text)+", found "+describe(t))
	}
	right, err := p.operand("after " + quote(t.text))
	if err != nil {
		return nil, err
	}
	p.cmps++
	if p.cmps > MaxComparisons {
		return nil, p.fail(start, fmt.Sprintf("more than %d comparisons", MaxComparisons))
	}
	switch {
	case left.field != nil && right.field != nil:
		return nil, p.fail(right.tok, "comparing two fields is not supported; compare "+quote(left.name)+" with a value")
	case left.field == nil && right.field == nil:
		return nil, p.fail(start, "a comparison needs a field on one side")
	case left.field == nil:
		left, right, op = right, left, cmpSwap[op]
	}
	return p.bind(left, op, right.tok)
}

// bind type-checks the literal against the field and turns it into a
// placeholder; only the Column, which the caller trusts, enters the SQL.
func (p *parser) bind(f operand, op cmpOp, lit token) (*node, error) {
	n := &node{kind: nCmp, col: f.field.Column, op: op}
	name := quote(f.name)
	if lit.kind == tWord && strings.EqualFold(lit.text, "null") {
		if op != opEq && op != opNe {
			return nil, p.fail(lit, "null can only be compared with eq or ne")
		}
		return n, nil
	}
	var v any
	switch f.field.Kind {
	case String:
		if !textual(lit) {
			return nil, p.fail(lit, name+" is text: put the value in single quotes, e.g. 'abc'")
		}
		v = lit.text
		if f.field.Literal != nil {
			alt, ok := f.field.Literal(lit.text)
			if !ok {
				return nil, p.fail(lit, name+" is "+f.field.LiteralHint+", found "+describe(lit))
			}
			// Only equality: its other value orders nowhere near where
			// its text does.
			if alt != lit.text && (op == opEq || op == opNe) {
				return p.either(n, op, lit.text, alt), nil
			}
		}
	case Date:
		d, midnight, ok := dateLiteral(lit.text)
		if !ok {
			return nil, p.fail(lit, name+" is a date: use the form 2027-01-31, found "+describe(lit))
		}
		if !midnight {
			// A date stands for its day's start, in the literal's own
			// offset (dates hold no zone, and a client writing its local
			// midnight means that day): after a later time of day d
			// exactly when after d, before it when not after d.
			switch op {
			case opGt, opGe:
				n.op = opGt
			case opLt, opLe:
				n.op = opLe
			default: // equal never: say so rather than match nothing
				return nil, p.fail(lit, name+" is a date: compared with eq or ne, a time must be midnight (2027-01-31T00:00:00Z), found "+describe(lit))
			}
		}
		v = d
	case Int:
		if lit.kind == tString && f.field.Alias != nil {
			i, ok := f.field.Alias(lit.text)
			if !ok {
				return nil, p.fail(lit, name+" is a whole number or "+f.field.AliasHint+", found "+describe(lit))
			}
			v = i
			break
		}
		// 32 bits, as a PostgreSQL integer column holds: past them the
		// comparison would fail in the database, not here.
		i, err := strconv.ParseInt(lit.text, 10, 32)
		switch {
		case lit.kind == tWord && errors.Is(err, strconv.ErrRange):
			return nil, p.fail(lit, fmt.Sprintf("%s is a whole number from %d to %d, found %s", name, math.MinInt32, math.MaxInt32, describe(lit)))
		case lit.kind != tWord || err != nil:
			return nil, p.fail(lit, name+" is a whole number, found "+describe(lit))
		}
		v = i
	case Bool:
		if lit.kind != tWord || !isLiteralWord(lit.text) {
			return nil, p.fail(lit, name+" is true or false, found "+describe(lit))
		}
		if op != opEq && op != opNe {
			return nil, p.fail(lit, name+" can only be compared with eq or ne")
		}
		v = strings.EqualFold(lit.text, "true")
	case UUID:
		if !textual(lit) || !isUUID(lit.text) {
			return nil, p.fail(lit, name+" is an id: use the form '123e4567-e89b-12d3-a456-426614174000', found "+describe(lit))
		}
		v = strings.ToLower(lit.text)
	default:
		return nil, p.fail(lit, name+" cannot be filtered on")
	}
	p.args = append(p.args, v)
	n.ph = "$" + strconv.Itoa(p.offset+len(p.args))
	return n, nil
}

// textual reports whether lit stands for text: quoted, or a GUID written
// bare. OData v4 writes a Guid literal without quotes (id eq
// 01a21835-2ddb-4c8b-9c1a-1b2c3d4e5f60), and clients that build filters
// from the standard do; its text is the id, whether the field is typed as
// one or holds ids as text (resourceId).
func textual(lit token) bool {
	return lit.kind == tString || lit.kind == tWord && isUUID(lit.text)
}

// either is n (eq or ne) against a literal that stands for two values:
// "equals either" for eq, and its negation, "equals neither", for ne,
// which render pushes down to (c <> a OR c IS NULL) AND (c <> b OR ...).
func (p *parser) either(n *node, op cmpOp, a, b string) *node {
	eq := func(v string) *node {
		p.args = append(p.args, v)
		return &node{kind: nCmp, col: n.col, op: opEq, ph: "$" + strconv.Itoa(p.offset+len(p.args))}
	}
	or := &node{kind: nOr, kids: []*node{eq(a), eq(b)}}
	if op == opNe {
		return &node{kind: nNot, kids: []*node{or}}
	}
	return or
}

// dateLiteral reads a date, or a date and time as clients build one from
// a time value (2027-01-31T00:00:00Z, 2027-01-31T00:00:00.000+02:00, with no
// offset), and returns its date as written and whether its time is
// midnight.
func dateLiteral(s string) (date string, midnight, ok bool) {
	if len(s) < 10 || !looksLikeDate(s[:10]) || !validDate(s[:10]) {
		return "", false, false
	}
	if len(s) == 10 {
		return s, true, true
	}
	for _, layout := range dateTimeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return s[:10], t.Hour() == 0 && t.Minute() == 0 && t.Second() == 0 && t.Nanosecond() == 0, true
		}
	}
	return "", false, false
}

// dateTimeLayouts are the forms of a date and time a $filter takes: RFC
// 3339 (JavaScript's toISOString, .NET's "o"), and the same without an
// offset or without seconds (Python's isoformat of a naive time).
var dateTimeLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04:05.999999999",
	"2006-01-02T15:04Z07:00",
	"2006-01-02T15:04",
}

// looksLikeDate insists on exactly YYYY-MM-DD, which time.Parse alone does
// not guarantee for every layout element.
func looksLikeDate(s string) bool {
	if len(s) != 10 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if i == 4 || i == 7 {
			if s[i] != '-' {
				return false
			}
		} else if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// validDate rejects days that do not exist and year 0, which PostgreSQL
// refuses as out of range.
func validDate(s string) bool {
	d, err := time.Parse(time.DateOnly, s)
	return err == nil && d.Year() >= 1
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c|0x20 >= 'a' && c|0x20 <= 'f') {
				return false
			}
		}
	}
	return true
}

// Precedence of rendered SQL, to add parentheses only where needed.
const (
	precOr = iota
	precAnd
	precAtom
)

// render emits SQL with no NOT operator: negation is pushed down to the
// comparisons (De Morgan), where each becomes its complement. Without NOT,
// SQL's unknown behaves as false everywhere, which gives OData's two-valued
// semantics: a comparison against a null column is false unless it is ne
// (or a negated eq/gt/...), which is true — hence the added "OR c IS NULL".
func render(n *node, neg bool) (string, int) {
	switch n.kind {
	case nNot:
		return render(n.kids[0], !neg)
	case nAnd, nOr:
		sep, prec := " AND ", precAnd
		if (n.kind == nOr) != neg {
			sep, prec = " OR ", precOr
		}
		parts := make([]string, len(n.kids))
		for i, k := range n.kids {
			s, kp := render(k, neg)
			if kp < prec {
				s = "(" + s + ")"
			}
			parts[i] = s
		}
		return strings.Join(parts, sep), prec
	}
	op := n.op
	if neg {
		op = cmpNegate[op]
	}
	if n.ph == "" {
		if op == opEq {
			return n.col + " IS NULL", precAtom
		}
		return n.col + " IS NOT NULL", precAtom
	}
	s := n.col + " " + cmpSQL[op] + " " + n.ph
	// Null is true for ne and for any negated comparison except ne.
	if (n.op == opNe) != neg {
		return "(" + s + " OR " + n.col + " IS NULL)", precAtom
	}
	return s, precAtom
}
