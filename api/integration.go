package api

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// IntegrationName keeps what a log line, an event header and an operator's
// terminal can safely carry of an x-integration-name header, whichever
// transport brought it: no control characters (C0, DEL, and C1, where
// U+009B is a terminal's CSI), and none of the bidirectional embedding,
// override and isolate controls a holiday reason refuses, which would make
// the name, and the columns of `astro audit` after it, read other than
// they are.
func IntegrationName(v string) string {
	v = strings.TrimSpace(v)
	if len(v) > 100 {
		cut := 100
		for cut > 0 && !utf8.RuneStart(v[cut]) {
			cut-- // not inside a character
		}
		v = v[:cut]
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 {
			return -1
		}
		return r
	}, v)
}
