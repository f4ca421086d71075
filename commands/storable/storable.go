// Package storable says whether a JSON document holds only what the read
// model (PostgreSQL text and jsonb) stores as it was sent. encoding/json is
// more lenient than PostgreSQL: it turns invalid UTF-8 and lone surrogate
// escapes into U+FFFD without a word, keeps the last of duplicate keys, and
// takes any number; PostgreSQL refuses NUL, lone surrogates and numbers its
// numeric type cannot hold. A write accepted on those terms would be
// appended, then parked by the projector, never seen yet counted. So every
// body is checked on its raw bytes, at the door, by Check; and by Err,
// which also refuses two top-level keys that differ only in case, since
// encoding/json reads a body's field names in any case and keeps the last.
package storable

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"astro/commands"
	"astro/events"
)

// A number must also fit a 64-bit float: clients decode JSON numbers into
// doubles (JavaScript, Go's float64), and one number beyond that range would
// make a whole list undecodable for its reader. Going below the range (to
// zero) only loses precision, which doubles do anyway.
//
// PostgreSQL numeric limits (numeric.c): at most NUMERIC_MAX_DSCALE digits
// after the point once the exponent is applied, and 131,072 before it.
// PostgreSQL 14 and older also refuse an exponent beyond
// NUMERIC_MAX_PRECISION (1000) in magnitude; newer ones take it, but the read
// model may be either, so the stricter rule holds.
const (
	maxExponent      = 1000
	maxScale         = 16383
	maxIntegerDigits = 131072
)

// Problem is one refusal, under the top-level field it was found in ("" for
// the document itself).
type Problem struct {
	Field   string
	Message string
}

// Messages of the problems, written for the client.
const (
	MsgUTF8      = "The text is not valid UTF-8."
	MsgSurrogate = "The text holds a lone UTF-16 surrogate escape (\\ud800-\\udfff), which is no character."
	MsgNUL       = "The text must not contain NUL characters (\\u0000)."
	MsgNumber    = "A number is out of range: it must fit a 64-bit float (at most about 1.8e308 in magnitude), with an exponent of at most 1000 and at most 16383 digits after the point."
	MsgDuplicate = "An object repeats the key %q."
	MsgSameField = "The keys %q and %q name one field: field names are read in any case."
)

// Check reports what of doc the read model would refuse or change, at most
// one problem per top-level field. doc must be syntactically valid JSON
// (callers check with encoding/json); on anything else Check reports
// nothing it is not sure of.
func Check(doc []byte) []Problem {
	c := checker{doc: doc, seen: map[string]bool{}}
	c.value(0)
	return c.problems
}

type checker struct {
	doc      []byte
	pos      int
	field    string // the top-level key being read
	problems []Problem
	seen     map[string]bool // fields already reported
	broken   bool            // doc is not JSON: stop
	inKey    bool            // reading a top-level key: problems are held
	held     []string
	// folded holds the top-level keys read so far by their case fold, when
	// the document is a request body (Err): encoding/json reads its field
	// names in any case and keeps the last of two that differ only so.
	folded map[string]string
}

func (c *checker) report(msg string) {
	if c.inKey {
		c.held = append(c.held, msg)
		return
	}
	if c.seen[c.field] {
		return
	}
	c.seen[c.field] = true
	c.problems = append(c.problems, Problem{Field: c.field, Message: msg})
}

func (c *checker) space() {
	for c.pos < len(c.doc) {
		switch c.doc[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

func (c *checker) value(depth int) {
	c.space()
	if c.broken || c.pos >= len(c.doc) {
		c.broken = true
		return
	}
	switch b := c.doc[c.pos]; {
	case b == '{':
		c.object(depth)
	case b == '[':
		c.pos++
		c.space()
		if c.pos < len(c.doc) && c.doc[c.pos] == ']' {
			c.pos++
			return
		}
		for !c.broken {
			c.value(depth + 1)
			c.space()
			if c.pos >= len(c.doc) {
				c.broken = true
				return
			}
			if c.doc[c.pos] == ']' {
				c.pos++
				return
			}
			c.pos++ // ','
		}
	case b == '"':
		c.str()
	case b == '-' || b >= '0' && b <= '9':
		c.number()
	default: // true, false, null
		for c.pos < len(c.doc) && c.doc[c.pos] >= 'a' && c.doc[c.pos] <= 'z' {
			c.pos++
		}
	}
}

func (c *checker) object(depth int) {
	c.pos++ // '{'
	keys := map[string]bool{}
	c.space()
	if c.pos < len(c.doc) && c.doc[c.pos] == '}' {
		c.pos++
		return
	}
	for !c.broken {
		c.space()
		if c.pos >= len(c.doc) || c.doc[c.pos] != '"' {
			c.broken = true
			return
		}
		if depth == 0 {
			// The key names the field, even when the key itself is at fault:
			// hold its problems until it is read.
			c.inKey = true
		}
		key := c.str()
		if depth == 0 {
			c.field, c.inKey = key, false
			for _, msg := range c.held {
				c.report(msg)
			}
			c.held = c.held[:0]
		}
		if keys[key] {
			c.report(fmt.Sprintf(MsgDuplicate, key))
		} else if depth == 0 && c.folded != nil {
			f := fold(key)
			if first, ok := c.folded[f]; ok {
				c.report(fmt.Sprintf(MsgSameField, first, key))
			}
			c.folded[f] = key
		}
		keys[key] = true
		c.space()
		if c.pos >= len(c.doc) || c.doc[c.pos] != ':' {
			c.broken = true
			return
		}
		c.pos++
		c.value(depth + 1)
		c.space()
		if c.pos >= len(c.doc) {
			c.broken = true
			return
		}
		if c.doc[c.pos] == '}' {
			c.pos++
			if depth == 0 {
				c.field = ""
			}
			return
		}
		c.pos++ // ','
	}
}

// str reads a string at pos and returns it decoded, reporting what
// PostgreSQL would refuse in it.
func (c *checker) str() string {
	c.pos++ // '"'
	var out []byte
	for c.pos < len(c.doc) {
		b := c.doc[c.pos]
		switch {
		case b == '"':
			c.pos++
			return string(out)
		case b == '\\':
			if c.pos+1 >= len(c.doc) {
				c.broken = true
				return string(out)
			}
			if c.doc[c.pos+1] != 'u' {
				out = append(out, unescape(c.doc[c.pos+1]))
				c.pos += 2
				continue
			}
			r, ok := hex4(c.doc, c.pos+2)
			if !ok {
				c.broken = true
				return string(out)
			}
			c.pos += 6
			switch {
			case r == 0:
				c.report(MsgNUL)
			case r >= 0xd800 && r < 0xdc00:
				low, ok := rune(0), false
				if c.pos+1 < len(c.doc) && c.doc[c.pos] == '\\' && c.doc[c.pos+1] == 'u' {
					low, ok = hex4(c.doc, c.pos+2)
				}
				if !ok || low < 0xdc00 || low > 0xdfff {
					c.report(MsgSurrogate)
					break
				}
				c.pos += 6
				r = 0x10000 + (r-0xd800)<<10 + (low - 0xdc00)
			case r >= 0xdc00 && r <= 0xdfff:
				c.report(MsgSurrogate)
			}
			out = utf8.AppendRune(out, r)
		case b < utf8.RuneSelf:
			out = append(out, b)
			c.pos++
		default:
			r, n := utf8.DecodeRune(c.doc[c.pos:])
			if r == utf8.RuneError && n <= 1 {
				c.report(MsgUTF8)
				n = 1
			}
			out = append(out, c.doc[c.pos:c.pos+n]...)
			c.pos += n
		}
	}
	c.broken = true
	return string(out)
}

func unescape(b byte) byte {
	switch b {
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	}
	return b // '"', '\\', '/'
}

func hex4(doc []byte, at int) (rune, bool) {
	if at+4 > len(doc) {
		return 0, false
	}
	var r rune
	for _, b := range doc[at : at+4] {
		r <<= 4
		switch {
		case b >= '0' && b <= '9':
			r |= rune(b - '0')
		case b >= 'a' && b <= 'f':
			r |= rune(b - 'a' + 10)
		case b >= 'A' && b <= 'F':
			r |= rune(b - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}

// number reads a number at pos and reports one PostgreSQL's numeric cannot
// hold.
func (c *checker) number() {
	start := c.pos
	if c.doc[c.pos] == '-' {
		c.pos++
	}
	digits := func() int {
		n := 0
		for c.pos < len(c.doc) && c.doc[c.pos] >= '0' && c.doc[c.pos] <= '9' {
			c.pos++
			n++
		}
		return n
	}
	intStart := c.pos
	intDigits := digits()
	fracDigits := 0
	if c.pos < len(c.doc) && c.doc[c.pos] == '.' {
		c.pos++
		fracDigits = digits()
	}
	// Leading zeros (of "0.001") are no digits of the value.
	zeros := 0
	for i := intStart; i < c.pos && (c.doc[i] == '0' || c.doc[i] == '.'); i++ {
		if c.doc[i] == '0' {
			zeros++
		}
	}
	exp, expTooLong := 0, false
	if c.pos < len(c.doc) && (c.doc[c.pos] == 'e' || c.doc[c.pos] == 'E') {
		c.pos++
		negative := c.pos < len(c.doc) && c.doc[c.pos] == '-'
		if c.pos < len(c.doc) && (c.doc[c.pos] == '+' || c.doc[c.pos] == '-') {
			c.pos++
		}
		for c.pos < len(c.doc) && c.doc[c.pos] == '0' {
			c.pos++
		}
		// Read by hand, not parsed: an exponent of a quarter of a million
		// digits would cost big-number arithmetic for a certain refusal.
		start := c.pos
		digits()
		if c.pos-start > 9 {
			expTooLong = true
		}
		for _, b := range c.doc[start:min(c.pos, start+9)] {
			exp = exp*10 + int(b-'0')
		}
		if negative {
			exp = -exp
		}
	}
	if c.pos == start {
		c.broken = true
		return
	}
	if expTooLong || exp > maxExponent || exp < -maxExponent {
		c.report(MsgNumber)
		return
	}
	if _, err := strconv.ParseFloat(string(c.doc[start:c.pos]), 64); err != nil {
		c.report(MsgNumber) // beyond a double: ErrRange
		return
	}
	e := exp
	if fracDigits-e > maxScale || intDigits+e-zeros > maxIntegerDigits {
		c.report(MsgNumber)
	}
}

// Err is Check's problems as a validation error (nil when there are
// none), each under its top-level field, or under "body" when the field's
// name is not a plain name (1 to 64 letters, digits, '-' or '_'): a key the
// client made up is echoed back only when it can be told apart from the
// path syntax of the error's schema (a key such as "00.0" breaks it).
//
// doc is a request body: two top-level keys that differ only in case are
// refused too, as encoding/json would read them as one field in silence.
func Err(doc []byte) error {
	c := checker{doc: doc, seen: map[string]bool{}, folded: map[string]string{}}
	c.value(0)
	problems := c.problems
	if len(problems) == 0 {
		return nil
	}
	v := commands.Validation{}
	for _, p := range problems {
		field := p.Field
		if !events.ValidToken(field) {
			field = "body"
		}
		v.Add(field, p.Message)
	}
	return v.Err()
}

// fold is key with each character as the least of its case orbit
// (unicode.SimpleFold): two keys fold alike exactly when strings.EqualFold
// holds, which is how encoding/json matches a key to a field (the Kelvin
// sign and the long s included).
func fold(key string) string {
	return strings.Map(func(r rune) rune {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		return least
	}, key)
}
