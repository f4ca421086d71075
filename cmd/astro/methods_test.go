package main

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"astro/api"
)

// TestMethodNotAllowedOnEveryPath: a path of the document asked with a
// method it does not have answers 405 MethodNotAllowed with Allow, for
// every path. Before, POST /api/data/notifications/unreadcount answered 404:
// the router's POST /notifications/:name route took it.
func TestMethodNotAllowedOnEveryPath(t *testing.T) {
	s := startService(t)
	alice := token(t, "alice", "w1")
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	const id = "0193a6a2-7c5e-7000-8000-000000000000"
	checked := 0
	for path, ops := range doc.Paths {
		var has []string
		for m := range ops {
			if m = strings.ToUpper(m); slices.Contains([]string{"GET", "POST", "PUT", "DELETE", "PATCH"}, m) {
				has = append(has, m)
			}
		}
		slices.Sort(has)
		wantAllow := strings.Join(append(slices.Clone(has), "OPTIONS"), ", ")
		concrete := strings.NewReplacer("{id}", id).Replace(path)
		for _, m := range []string{"GET", "POST", "PUT", "DELETE", "PATCH"} {
			if slices.Contains(has, m) {
				continue
			}
			env := s.call(m, concrete, alice, nil)
			if env.Status != http.StatusMethodNotAllowed || env.StatusCode != "MethodNotAllowed" {
				t.Errorf("%s %s: HTTP %d %s, want 405 MethodNotAllowed: %s", m, concrete, env.Status, env.StatusCode, env.raw)
				continue
			}
			if got := env.Header.Get("Allow"); got != wantAllow {
				t.Errorf("%s %s: Allow %q, want %q", m, concrete, got, wantAllow)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no path checked")
	}
	// Without a token as well: which methods a path has is no secret, and
	// a client learns it before it is asked who it is.
	if env := s.call("POST", "/api/data/notifications/unreadcount", "", nil); env.Status != 405 || env.Header.Get("Allow") != "GET, OPTIONS" {
		t.Errorf("POST unreadcount without a token: HTTP %d Allow %q", env.Status, env.Header.Get("Allow"))
	}
	// An unknown path stays 404, whatever the method.
	for _, m := range []string{"GET", "POST", "PATCH"} {
		if env := s.call(m, "/api/data/notifications/nothing", alice, nil); env.Status != 404 {
			t.Errorf("%s /api/data/notifications/nothing: HTTP %d", m, env.Status)
		}
	}
}
