package events

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"time"
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
