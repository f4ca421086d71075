package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

// TestAuditPrintsNoControls: an integration name kept its bidirectional
// and C1 controls, was stored, and `astro audit holiday` printed it raw,
// where U+202E reversed the columns after it on the operator's terminal.
// The name is cleaned where it enters, as a reason is refused.
func TestAuditPrintsNoControls(t *testing.T) {
	s := startService(t)
	alice := token(t, "alice", "w1")
	h := s.createHoliday(alice, map[string]any{"reason": "New Year", "type": "global", "dateFrom": "2027-01-01", "dateTo": "2027-01-01"})
	s.call("PUT", "/api/data/holidays/"+h.ID, alice, map[string]any{"reason": "Renamed"},
		"x-integration-name", "cal\u202eendar\u0085-\u2066app").want(t, 200)
	var hist []struct {
		IntegrationName string `json:"integrationName"`
	}
	s.call("GET", "/api/data/holidays/"+h.ID+"/history", alice, nil).want(t, 200).decode(t, &hist)
	if len(hist) != 2 || hist[1].IntegrationName != "calendar-app" {
		t.Errorf("history names %+v, want calendar-app on the rename", hist)
	}
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"audit", "holiday", h.ID, "--workspace", "w1"}, func(k string) string { return s.env[k] }, &out, &errOut); err != nil {
		t.Fatalf("audit: %v\n%s", err, errOut.String())
	}
	if i := strings.IndexFunc(out.String(), unsafeOnATerminal); i >= 0 {
		t.Errorf("audit printed %q at %d:\n%q", []rune(out.String()[i:])[0], i, out.String())
	}
}

// unsafeOnATerminal reports what a terminal does not show as itself, the
// layout's tabs and line ends aside.
func unsafeOnATerminal(r rune) bool {
	return r != '\n' && r != ' ' && !strconv.IsPrint(r)
}

// TestTerminalSafe: names recorded by older releases are printed escaped.
func TestTerminalSafe(t *testing.T) {
	for in, want := range map[string]string{
		"calendar-app":   "calendar-app",
		"-":              "-",
		"Café":           "Café",
		"cal\u202eendar": `"cal\u202eendar"`,
		"a\u009b31mb":    `"a\u009b31mb"`,
		"a\tb":           `"a\tb"`,
		"a\xffb":         `"a\xffb"`,
	} {
		if got := terminalSafe(in); got != want {
			t.Errorf("terminalSafe(%q) = %s, want %s", in, got, want)
		}
		if strings.ContainsFunc(terminalSafe(in), unsafeOnATerminal) {
			t.Errorf("terminalSafe(%q) is not safe", in)
		}
	}
}
