package main

import (
	"fmt"
	"maps"
	"strconv"
	"testing"

	"astro/api"
)

// TestWritesOnOneInstanceAreReadOnAnother runs two instances on one log and
// one database, writes on one and reads on the other at once, 1,000 times:
// a read never misses an answered write, whichever instance answered it,
// and the client sends no token for that.
func TestWritesOnOneInstanceAreReadOnAnother(t *testing.T) {
	a := startService(t)
	env := maps.Clone(a.env)
	env["ASTRO_DATA_DIR"] = t.TempDir()
	b := startWithEnv(t, env)

	svc, alice := sender(t, "w1"), token(t, "alice", "w1")
	upstream := token(t, "hr-sync", "w1", "resources:write")
	h := a.createHoliday(alice, map[string]any{"reason": "Day 0", "type": "global", "dateFrom": "2027-05-01", "dateTo": "2027-05-01"})

	var sent []string
	unread, resources := 0, 0
	for i := range 1000 {
		write, read := a, b
		if i%2 == 1 {
			write, read = b, a
		}
		switch i % 10 {
		case 3: // a mark read, seen in the count
			write.call("POST", "/api/data/notifications/"+sent[len(sent)-1]+"/markread", alice, nil).want(t, 200)
			unread--
		case 7: // a rename, seen in the holiday
			reason := fmt.Sprint("Day ", i)
			write.call("PUT", "/api/data/holidays/"+h.ID, alice, map[string]any{"reason": reason}).want(t, 200)
			if got := read.holiday(alice, h.ID); got.Reason != reason {
				t.Fatalf("write %d: read %q on the other instance, want %q", i, got.Reason, reason)
			}
		case 9: // a resource, seen in the holiday's scope
			write.upsertResource(upstream, "r"+strconv.Itoa(i), "GB", true, false)
			resources++
			if got := read.holiday(alice, h.ID); len(got.Resources) != resources {
				t.Fatalf("write %d: %d resources in scope on the other instance, want %d", i, len(got.Resources), resources)
			}
		default:
			sent = append(sent, write.send(svc, "alice", "bob", "task").ID)
			unread++
		}
		if got := read.unread(alice); got != unread {
			t.Fatalf("write %d: unread %d on the other instance, want %d", i, got, unread)
		}
	}
}

func TestPositionTokens(t *testing.T) {
	s := startService(t)
	svc, alice := sender(t, "w1"), token(t, "alice", "w1")
	position := func(e envelope) uint64 { t.Helper(); return positionOf(t, e) }
	// /history and ?asOf= read the log itself, and took any header.
	h := s.createHoliday(alice, map[string]any{"reason": "Kept", "type": "global", "dateFrom": "2027-01-01", "dateTo": "2027-01-01"})
	body := map[string]any{"recipientId": "alice", "senderId": "0000b0b0-0000-4000-8000-000000000001", "notificationType": "task"}
	first := position(s.call("POST", sendPath, svc, body).want(t, 200))
	second := s.call("POST", sendPath, svc, body).want(t, 200)
	if position(second) <= first {
		t.Fatalf("positions %d then %d: not increasing", first, position(second))
	}
	var sent notificationDto
	second.decode(t, &sent)
	read := s.call("POST", "/api/data/notifications/"+sent.ID+"/markread", alice, nil).want(t, 200)
	again := s.call("POST", "/api/data/notifications/"+sent.ID+"/markread", alice, nil).want(t, 200)
	if position(again) != position(read) {
		t.Fatalf("a no-op answered position %d, want the inbox's %d", position(again), position(read))
	}

	// Positions are sealed (api.PositionSeal): one bare, or another
	// workspace's, is refused.
	elsewhere := s.call("POST", sendPath, sender(t, "w2"), body).want(t, 200).Header.Get("X-Astro-Position")
	holidayWrite := s.call("POST", "/api/data/holidays", alice, map[string]any{"reason": "Other", "type": "global", "dateFrom": "2027-02-01", "dateTo": "2027-02-01"}).
		want(t, 200).Header.Get("X-Astro-Position")
	tests := []struct {
		name, min string
		status    int
	}{
		{"a write's position", read.Header.Get("X-Astro-Position"), 200},
		{"an older one", sealPosition(t, api.InboxPositions, 1), 200},
		{"none yet in the log", sealPosition(t, api.InboxPositions, position(read)+1000), 400},
		{"a holiday write's", holidayWrite, 200},
		{"none yet in the history", sealPosition(t, api.HistoryPositions, position(read)+1000), 400},
		{"a bare number", strconv.FormatUint(position(read), 10), 400},
		{"another workspace's", elsewhere, 400},
		{"not a number", "soon", 400},
		{"negative", "-1", 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, path := range []string{"/api/data/notifications/unreadcount", "/api/data/notifications", "/api/data/holidays/global",
				"/api/data/holidays/" + h.ID + "/history", "/api/data/holidays/" + h.ID + "?asOf=2030-01-01T00:00:00Z"} {
				e := s.call("GET", path, alice, nil, "X-Astro-Min-Position", tt.min).want(t, tt.status)
				if tt.status == 400 && len(e.Error.ValidationErrors["X-Astro-Min-Position"]) == 0 {
					t.Fatalf("%s: no validation error for the header: %s", path, e.raw)
				}
			}
		})
	}
	if n := s.unread(alice); n != 1 {
		t.Fatalf("unread %d, want 1", n)
	}
}

// TestRenamesShowTheResourcesWrittenBeforeThem runs two instances on one
// log and one database and changes the workspace's resources on either
// right before renames on either: every rename's answer shows the
// resources as they are, though the instance whose projector runs answers
// from what that projector received, without asking the log.
func TestRenamesShowTheResourcesWrittenBeforeThem(t *testing.T) {
	a := startService(t)
	env := maps.Clone(a.env)
	env["ASTRO_DATA_DIR"] = t.TempDir()
	b := startWithEnv(t, env)

	alice := token(t, "alice", "w1")
	upstream := token(t, "hr-sync", "w1", "resources:write")
	h := a.createHoliday(alice, map[string]any{"reason": "Day 0", "type": "global", "dateFrom": "2027-05-01", "dateTo": "2027-05-01"})
	inScope := map[string]bool{}
	instances := []*service{a, b}
	for i := range 400 {
		write := instances[i%2]
		switch name := "r" + strconv.Itoa(i/4%25); i % 4 {
		case 1: // in scope, or back in it
			write.upsertResource(upstream, name, "GB", true, false)
			inScope[name] = true
		case 3: // out of it: a guest, or inactive
			write.upsertResource(upstream, name, "GB", i%8 != 3, i%8 == 7)
			delete(inScope, name)
		}
		var got holidayDto
		rename := instances[i/2%2]
		rename.call("PUT", "/api/data/holidays/"+h.ID, alice, map[string]any{"reason": fmt.Sprint("Day ", i)}).want(t, 200).decode(t, &got)
		if len(got.Resources) != len(inScope) {
			t.Fatalf("rename %d: %d resources in its answer, want %d", i, len(got.Resources), len(inScope))
		}
	}
}
