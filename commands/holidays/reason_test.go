package holidays

import (
	"fmt"
	"testing"

	"astro/commands"
)

// TestReasonRefusesBidiControls: a reason could hold U+202E and make a
// calendar label read other than what it says.
func TestReasonRefusesBidiControls(t *testing.T) {
	for _, c := range []rune{0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2066, 0x2067, 0x2068, 0x2069} {
		reason := fmt.Sprintf("Team %cyad fo ffo", c)
		v := commands.Validation{}
		cleanReason(v, &reason)
		if len(v["reason"]) == 0 {
			t.Errorf("U+%04X accepted in a reason", c)
		}
	}
	// Right-to-left text itself, and the implicit marks, are fine.
	for _, reason := range []string{"يوم العمال", "חג פסח", "Eid \u200fal-Fitr\u200e"} {
		v := commands.Validation{}
		cleanReason(v, &reason)
		if len(v) != 0 {
			t.Errorf("%q refused: %v", reason, v)
		}
	}
}

// TestReasonRefusesControlCharacters: C1 controls too (U+0085, U+009B the
// terminal's CSI), as the event schemas and the API document say.
func TestReasonRefusesControlCharacters(t *testing.T) {
	for _, c := range []rune{0x00, 0x1b, 0x7f, 0x85, 0x9b} {
		reason := fmt.Sprintf("Day%cOff", c)
		v := commands.Validation{}
		cleanReason(v, &reason)
		if len(v["reason"]) == 0 {
			t.Errorf("U+%04X accepted in a reason", c)
		}
	}
}

// TestReasonMustShow: a reason of white space and invisible marks alone
// shows as nothing; one with any letter, digit or sign is kept as sent.
func TestReasonMustShow(t *testing.T) {
	for _, tc := range []struct {
		reason string
		ok     bool
	}{
		{"\u200b\u200b", false},
		{" \u200d\u2060\ufeff ", false},
		{"\u200b", false},
		{"Day\u200boff", true},
		{"7", true},
		{"🎉", true},
		{"—", true},
	} {
		v := commands.Validation{}
		cleanReason(v, &tc.reason)
		if ok := len(v["reason"]) == 0; ok != tc.ok {
			t.Errorf("%+q: accepted %v, want %v", tc.reason, ok, tc.ok)
		}
	}
}
