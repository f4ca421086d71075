package events

import (
	"fmt"
	"strings"
)

// Aggregate kinds. An inbox is one user's notifications: every notification
// command of a user is decided against it, so the 1,000-pending rule and
// concurrent deletes are settled in one place.
const (
	KindInbox    = "inbox"
	KindHoliday  = "holiday"
	KindResource = "resource"
	// KindWorkspace is a workspace as a whole; its one event so far is
	// its erasure, on the subject whose id is the workspace itself.
	KindWorkspace = "workspace"
)

// SubjectPrefix is the root of every event subject in the log.
const SubjectPrefix = "astro.events"

// Aggregate names the consistency boundary an event belongs to.
type Aggregate struct {
	Kind string
	ID   string
}

// Subject is the log subject of an aggregate in a workspace:
// astro.events.<workspace>.<kind>.<id>. Optimistic concurrency is checked
// per subject, so one subject is exactly one aggregate.
func Subject(workspaceID string, a Aggregate) string {
	return SubjectPrefix + "." + workspaceID + "." + a.Kind + "." + a.ID
}

// KindSubjects is the wildcard subject of every aggregate of a kind, in
// every workspace; projectors and consumers filter on it.
func KindSubjects(kind string) string {
	return SubjectPrefix + ".*." + kind + ".*"
}

// ParseSubject is the inverse of Subject.
func ParseSubject(s string) (workspaceID string, a Aggregate, err error) {
	rest, ok := strings.CutPrefix(s, SubjectPrefix+".")
	parts := strings.Split(rest, ".")
	if !ok || len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", Aggregate{}, fmt.Errorf("not an event subject: %q", s)
	}
	return parts[0], Aggregate{Kind: parts[1], ID: parts[2]}, nil
}

// ValidToken reports whether s can be one token of a subject: workspace,
// user and aggregate ids all become tokens, so the characters NATS gives a
// meaning to ('.', '*', '>', white space) must never reach a subject.
func ValidToken(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
