package main

import (
	"encoding/json"
	"io"
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
		if slices.Contains(has, "GET") {
			has = append(has, "HEAD") // served wherever GET is (RFC 9110)
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
	if env := s.call("POST", "/api/data/notifications/unreadcount", "", nil); env.Status != 405 || env.Header.Get("Allow") != "GET, HEAD, OPTIONS" {
		t.Errorf("POST unreadcount without a token: HTTP %d Allow %q", env.Status, env.Header.Get("Allow"))
	}
	// An unknown path stays 404, whatever the method.
	for _, m := range []string{"GET", "POST", "PATCH"} {
		if env := s.call(m, "/api/data/notifications/nothing", alice, nil); env.Status != 404 {
			t.Errorf("%s /api/data/notifications/nothing: HTTP %d", m, env.Status)
		}
	}
}

// TestHeadIsGetWithoutContent: RFC 9110 serves HEAD wherever GET is, with
// GET's status and headers and no content. Before, every path answered
// HEAD with 405 (or 404 where the document does not list it).
func TestHeadIsGetWithoutContent(t *testing.T) {
	s := startService(t)
	alice := token(t, "alice", "w1")
	holiday := s.createHoliday(alice, map[string]any{"reason": "R", "type": "global", "dateFrom": "2027-01-01", "dateTo": "2027-01-01"})
	// Plain requests: the test client's contract checks bodies, and a
	// HEAD answer has none.
	do := func(method, path, tok string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, s.base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, body
	}
	for _, tc := range []struct{ path, tok string }{
		{"/healthz", ""},
		{"/openapi.json", ""},
		{"/api/data/notifications", alice},
		{"/api/data/notifications?asFlatList=true", alice},
		{"/api/data/notifications/unreadcount", alice},
		{"/api/data/notifications/count", alice},
		{"/api/data/notifications/count", ""}, // 401, as GET
		{"/api/data/holidays/global", alice},
		{"/api/data/holidays/" + holiday.ID, alice},
		{"/api/data/holidays/" + holiday.ID + "/history", alice},
		{"/api/data/holidays/0193a6a2-7c5e-7000-8000-000000000000", alice}, // 404, as GET
		{"/api/data/holidays/global?$top=x", alice},                        // 400, as GET
	} {
		get, _ := do("GET", tc.path, tc.tok)
		head, body := do("HEAD", tc.path, tc.tok)
		if head.StatusCode != get.StatusCode || len(body) != 0 {
			t.Errorf("HEAD %s: HTTP %d with %d bytes; GET answers %d", tc.path, head.StatusCode, len(body), get.StatusCode)
		}
		for _, h := range []string{"Content-Type", "Content-Length", "WWW-Authenticate"} {
			if head.Header.Get(h) != get.Header.Get(h) {
				t.Errorf("HEAD %s: %s %q, GET's is %q", tc.path, h, head.Header.Get(h), get.Header.Get(h))
			}
		}
	}
	// The stream's head, and no stream held: more HEADs than one user may
	// hold streams all answer.
	for range 7 {
		head, body := do("HEAD", streamPath, alice)
		if head.StatusCode != 200 || head.Header.Get("Content-Type") != "text/event-stream" || len(body) != 0 {
			t.Fatalf("HEAD %s: HTTP %d %q with %d bytes", streamPath, head.StatusCode, head.Header.Get("Content-Type"), len(body))
		}
	}
	// OPTIONS lists HEAD where GET is; where GET is not, HEAD is 405.
	if resp, _ := do("OPTIONS", "/api/data/holidays/global", alice); resp.Header.Get("Allow") != "GET, HEAD, OPTIONS" {
		t.Errorf("OPTIONS /api/data/holidays/global: Allow %q", resp.Header.Get("Allow"))
	}
	if resp, _ := do("HEAD", "/api/data/notifications/markallread", alice); resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST, OPTIONS" {
		t.Errorf("HEAD markallread: HTTP %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
}
