package events

import (
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// NewID returns a random UUID version 7: time-ordered, so ids sort
// roughly by creation and index well.
func NewID(now time.Time) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms (crypto/rand docs)
	ms := uint64(now.UnixMilli())
	b[0], b[1], b[2], b[3], b[4], b[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	b[6] = b[6]&0x0f | 0x70
	b[8] = b[8]&0x3f | 0x80
	return formatUUID(b)
}

// NameID derives a UUID (version 8, name-based) from parts, for ids that
// must be the same every time the same request is retried.
func NameID(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0}) // separator: ("ab","c") and ("a","bc") must differ
	}
	var b [16]byte
	copy(b[:], h.Sum(nil))
	b[6] = b[6]&0x0f | 0x80
	b[8] = b[8]&0x3f | 0x80
	return formatUUID(b)
}

func formatUUID(b [16]byte) string {
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

// ValidUUID reports whether s is a UUID in its canonical 8-4-4-4-12 hex
// form (either case).
func ValidUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// UUID is a UUID as 16 bytes: how state that holds many ids (an inbox)
// keeps them, at a fraction of the string's size.
type UUID [16]byte

// ParseUUID parses the canonical 8-4-4-4-12 hex form, in either case.
func ParseUUID(s string) (UUID, bool) {
	var u UUID
	if !ValidUUID(s) {
		return u, false
	}
	var compact [32]byte
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] != '-' {
			compact[n] = s[i]
			n++
		}
	}
	if _, err := hex.Decode(u[:], compact[:]); err != nil {
		return u, false
	}
	return u, true
}

// String is the canonical lower-case form.
func (u UUID) String() string { return formatUUID(u) }

// NameNamespace is the namespace of the name-based UUIDs Astro gives the
// ids upstream services name otherwise (see NameUUID). It was drawn once,
// at random (a version 4 UUID), and must never change: those UUIDs are
// stored in events and read models, and upstream services compute them
// too, so another namespace would make every such id name something else.
const NameNamespace = "107ccbb7-90f5-40e2-8cd5-8c761368fb92"

// MaxNameLen is the longest id, in characters, that NameUUID is given for
// an upstream id that is no UUID: room for any real key, never a document.
const MaxNameLen = 200

// NameRule is ValidName in words, for the messages of the commands that
// refuse what the api could not name.
const NameRule = "1 to 200 characters, without control characters or white space at either end, and not a UUID in another notation"

// NameUUID is the name-based UUID (RFC 9562, version 5) of name in
// NameNamespace, in lower case: the UUID Astro stores and serves where the
// public document types an id as uuid and an upstream service named it
// otherwise ("bob", "res-000", 42). The same name always gives the same
// UUID, here and in any RFC 9562 library given the namespace.
func NameUUID(name string) string {
	ns, _ := ParseUUID(NameNamespace) // a valid constant: TestNameUUID
	return nameUUID(ns, name).String()
}

// nameUUID is version 5: SHA-1 over the namespace's 16 bytes and the
// name's bytes, its first 16 bytes with the version and variant set.
// SHA-1 because version 5 is what every UUID library computes, so an
// upstream service needs no code of Astro's; it names ids, it guards
// nothing (version 8, as NameID, would be SHA-256 but nobody's default).
func nameUUID(ns UUID, name string) UUID {
	h := sha1.New()
	h.Write(ns[:])
	h.Write([]byte(name))
	var u UUID
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50
	u[8] = u[8]&0x3f | 0x80
	return u
}

// UUIDFor is the UUID an upstream id stands for: the id itself in lower
// case when it is a UUID, else its NameUUID when it is a name Astro takes
// (see ValidName). ok is false for anything else, which the caller
// refuses.
func UUIDFor(id string) (uuid string, ok bool) {
	if ValidUUID(id) {
		return strings.ToLower(id), true
	}
	if !ValidName(id) {
		return "", false
	}
	return NameUUID(id), true
}

// UpstreamID is the id an upstream service gives where the public
// document types it as uuid (a sender, a resource, data's taskId), as
// Astro keeps it: its UUIDFor, or the id as it came when it names none, for
// the command to refuse with its field or a filter to find nothing by.
// Requests pass their ids through it once, where they enter.
func UpstreamID(id string) string {
	if u, ok := UUIDFor(id); ok {
		return u
	}
	return id
}

// ValidName reports whether an id that is no UUID may be named by its
// NameUUID: valid UTF-8 of 1 to MaxNameLen characters, no control
// characters, no white space at either end, and not a UUID spelt another
// way. Each refusal is a case where naming would give a UUID other than
// the one the caller means, in silence, where a 400 tells them at once:
// "bob " almost always means "bob", and
// "{123e4567-e89b-12d3-a456-426614174000}" means that UUID, not the one its
// text would name. (Taking such spellings as the UUID they spell would be
// kinder, but an upstream service that computes NameUUID of its own ids
// would then disagree with Astro about every id that looks like one.)
func ValidName(id string) bool {
	if id == "" || !utf8.ValidString(id) || utf8.RuneCountInString(id) > MaxNameLen || strings.ContainsFunc(id, unicode.IsControl) {
		return false
	}
	first, _ := utf8.DecodeRuneInString(id)
	last, _ := utf8.DecodeLastRuneInString(id)
	if unicode.IsSpace(first) || unicode.IsSpace(last) {
		return false
	}
	return !otherUUIDSpelling(id)
}

// otherUUIDSpelling reports whether s is a UUID in one of the other forms
// clients write: in braces, as a URN, or as 32 hex digits without hyphens.
func otherUUIDSpelling(s string) bool {
	if len(s) >= 9 && strings.EqualFold(s[:9], "urn:uuid:") {
		s = s[9:]
	}
	if len(s) >= 2 && s[0] == '{' && s[len(s)-1] == '}' {
		s = s[1 : len(s)-1]
	}
	if ValidUUID(s) {
		return true
	}
	if len(s) != 32 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}
