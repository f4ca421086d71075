package main

// Fuzz targets against the whole service. Each target starts one service
// (in the FuzzX body, before f.Fuzz) and turns every input into an HTTP
// request to it. The server runs in the fuzzing process, so the fuzzer's
// coverage guidance reaches the handlers, the OData compiler and the
// command side.
//
// Every answer, whatever the input, must be the envelope of spec 2.1
// (checkEnvelope), with a statusCode naming its HTTP status, no 5xx, an
// error.message on every failure, a WWW-Authenticate on every 401, and it
// must arrive within fuzzRequestTimeout: a hang is a failure.
//
// Run one target at a time, e.g.
//
//	go test -run '^$' -fuzz '^FuzzQuery$' -fuzztime 60s ./cmd/astro/

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"astro/api"
	"astro/api/auth"
)

// fuzzRequestTimeout bounds every fuzz request. Writes wait at most 5 s for
// their read model, so 10 s is only exceeded by a hang.
const fuzzRequestTimeout = 10 * time.Second

// fuzzMaxInput keeps inputs well under the server's 64 KiB header limit and
// each execution fast; longer inputs are skipped, not failed.
const fuzzMaxInput = 8 << 10

// fuzzAnswer is one response, decoded and checked.
type fuzzAnswer struct {
	envelope
	elapsed time.Duration
}

// doChecked sends req through the harness's client, bounded by
// fuzzRequestTimeout, and holds the answer to the envelope rules. Any
// failure is reported on t (the fuzz input's own *testing.T).
func doChecked(t *testing.T, s *service, req *http.Request) fuzzAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), fuzzRequestTimeout)
	defer cancel()
	what := req.Method + " " + req.URL.String()
	start := time.Now()
	resp, err := s.client.Do(req.WithContext(ctx))
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: no answer within %v (hang)", what, fuzzRequestTimeout)
		}
		t.Fatalf("%s: %v", what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == 200 && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// The notification stream (a fuzzed id that spells "stream") never
		// ends: its first event, up to the blank line, stands for the answer.
		var first []byte
		rd := bufio.NewReader(resp.Body)
		for {
			line, err := rd.ReadBytes('\n')
			if err != nil {
				t.Fatalf("%s: reading the stream: %v", what, err)
			}
			first = append(first, line...)
			if len(bytes.TrimSpace(line)) == 0 && bytes.Contains(first, []byte("event: ")) {
				return fuzzAnswer{envelope: envelope{Status: resp.StatusCode, Header: resp.Header, raw: first}, elapsed: time.Since(start)}
			}
		}
	}
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: reading the answer: %v", what, err)
	}
	a := fuzzAnswer{envelope: envelope{Status: resp.StatusCode, Header: resp.Header, raw: raw}, elapsed: time.Since(start)}
	if err := json.Unmarshal(raw, &a.envelope); err != nil {
		t.Fatalf("%s: HTTP %d, body is not an envelope: %v\n%q", what, resp.StatusCode, err, raw)
	}
	checkEnvelope(t, what, a.envelope)
	if want := api.StatusName(a.Status); a.StatusCode != want {
		t.Errorf("%s: HTTP %d with statusCode %q, want %q", what, a.Status, a.StatusCode, want)
	}
	if a.Status >= 500 {
		t.Errorf("%s: HTTP %d: %s", what, a.Status, raw)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s: Content-Type %q", what, ct)
	}
	if a.Status == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("%s: 401 without WWW-Authenticate", what)
	}
	if a.Status >= 400 && len(a.Data) > 0 && !bytes.Equal(a.Data, []byte("null")) {
		t.Errorf("%s: HTTP %d with data: %s", what, a.Status, raw)
	}
	return a
}

// fuzzRequest builds a request, or reports false when the input cannot form
// one that a client could send (such inputs are skipped, not failed).
func fuzzRequest(s *service, method, pathAndQuery string, body []byte, headers ...string) (*http.Request, bool) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, s.base+pathAndQuery, rd)
	if err != nil {
		return nil, false
	}
	if req.URL.RawQuery == "" {
		// "path?" with nothing after it is the same request as "path".
		req.URL.ForceQuery = false
	}
	if strings.ContainsAny(req.URL.RequestURI(), " \t") {
		// Go's client sends a raw query as it is, and a space would split
		// the request line: not a request any client could mean.
		return nil, false
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if !sendableHeaderValue(headers[i+1]) {
			return nil, false
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	return req, true
}

// sendableHeaderValue is what Go's client agrees to send (RFC 9110 field
// content: no control characters but tab).
func sendableHeaderValue(v string) bool {
	if len(v) > fuzzMaxInput {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// longToken signs a token that outlives any fuzzing session. It is the
// same string in every process (fixed times), so a seed holding a token
// means the same in the fuzzing workers as where it was added.
func longToken(tb testing.TB, user, ws string, scopes ...string) string {
	tb.Helper()
	issued := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	tok, err := auth.Sign([]byte(testSecret), auth.Claims{UserID: user, WorkspaceID: ws, Scopes: scopes}, issued, 100*365*24*time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

// fuzzFixture is the data every target starts with: alice and bob in w1,
// mallory in w2, and something of each kind per workspace.
type fuzzFixture struct {
	s                     *service
	alice, bob, mallory   string // plain user tokens
	upstreamW1            string // notifications:send and resources:write in w1
	upstreamW2            string
	holidayW1, holidayW2  string // ids
	notifAlice, notifBob  string // ids
	aliceSecret, w1Secret string // text only alice, and only w1, may ever see
}

// expand replaces the placeholders {H1} (w1's holiday), {H1U} (its id in
// upper case), {H2} (w2's holiday), {N1} (alice's notification) and {N2}
// (bob's) with this process's ids. Seeds use the placeholders: every
// fuzzing worker starts its own service, with ids of its own.
func (x *fuzzFixture) expand(s string) string {
	if !strings.Contains(s, "{") {
		return s
	}
	return strings.NewReplacer(
		"{H1U}", strings.ToUpper(x.holidayW1), "{H1}", x.holidayW1, "{H2}", x.holidayW2,
		"{N1U}", strings.ToUpper(x.notifAlice), "{N1}", x.notifAlice, "{N2}", x.notifBob,
	).Replace(s)
}

func newFuzzFixture(f *testing.F) *fuzzFixture {
	f.Helper()
	// One caller sends thousands of requests a second: without this the
	// rate limit would answer most inputs with 429.
	s := startService(f, func(env map[string]string) { env["ASTRO_RATE_LIMIT"] = "off" })
	x := &fuzzFixture{
		s:           s,
		alice:       longToken(f, "alice", "w1"),
		bob:         longToken(f, "bob", "w1"),
		mallory:     longToken(f, "mallory", "w2"),
		upstreamW1:  longToken(f, "svc-tasks", "w1", "notifications:send", "resources:write"),
		upstreamW2:  longToken(f, "svc-tasks", "w2", "notifications:send", "resources:write"),
		aliceSecret: "alice-private-subject-7f3a",
		w1Secret:    "w1-private-reason-91cc",
	}
	for _, r := range []struct{ tok, id, country string }{
		{x.upstreamW1, "r-gb", "GB"}, {x.upstreamW1, "r-de", "DE"}, {x.upstreamW2, "r-gb", "GB"},
	} {
		s.call("PUT", "/api/data/resources/"+idOf(r.id), r.tok, map[string]any{
			"name": "Person " + r.id, "countryCode": r.country, "isActive": true, "isGuest": false,
		}).want(f, 200)
	}
	send := func(recipient, subject string) string {
		var n struct{ ID string }
		s.call("POST", "/api/data/notifications", x.upstreamW1, map[string]any{
			"recipientId": recipient, "senderId": "0000ca20-0000-4000-8000-000000000003", "notificationType": "task.assigned",
			"subject": subject, "message": "m", "data": map[string]any{"taskId": "6f1c2b9e-3d4a-4e5f-8a7b-9c0d1e2f3a4b"},
		}).want(f, 200).decode(f, &n)
		return n.ID
	}
	x.notifAlice = send("alice", x.aliceSecret)
	x.notifBob = send("bob", "for bob")
	send("bob", "for bob again")
	create := func(tok string, body map[string]any) string {
		var h struct{ ID string }
		s.call("POST", "/api/data/holidays", tok, body).want(f, 200).decode(f, &h)
		return h.ID
	}
	x.holidayW1 = create(x.alice, map[string]any{"reason": x.w1Secret, "type": "country", "dateFrom": "2027-12-26", "dateTo": "2027-12-27", "countryId": []string{"GB"}})
	// Its id is in no seed, so no fuzz input renames it: the secret stays.
	create(x.alice, map[string]any{"reason": x.w1Secret + " (kept)", "type": "people", "dateFrom": "2027-04-01", "dateTo": "2027-04-01", "resources": []string{idOf("r-gb")}})
	create(x.alice, map[string]any{"reason": "New Year", "type": "global", "dateFrom": "2027-01-01", "dateTo": "2027-01-01"})
	create(x.alice, map[string]any{"reason": "Offsite", "type": "people", "dateFrom": "2027-03-01", "dateTo": "2027-03-03", "resources": []string{idOf("r-de")}})
	x.holidayW2 = create(x.mallory, map[string]any{"reason": "Mallory day", "type": "global", "dateFrom": "2027-06-01", "dateTo": "2027-06-01"})
	return x
}

// noLeak fails when a body answered to a caller of another workspace (or
// another user) carries text it must never see. A secret the caller sent
// itself (in inputs, raw or unescaped) may come back in an error message
// that quotes the request, so it is not held against the answer.
func noLeak(t *testing.T, what string, a fuzzAnswer, inputs []string, secrets ...string) {
	t.Helper()
	var sent []string
	for _, in := range inputs {
		sent = append(sent, strings.ToLower(in))
		if u, err := url.PathUnescape(in); err == nil {
			sent = append(sent, strings.ToLower(u))
		}
		if u, err := url.QueryUnescape(in); err == nil {
			sent = append(sent, strings.ToLower(u))
		}
	}
	body := strings.ToLower(string(a.raw))
secrets:
	for _, secret := range secrets {
		secret = strings.ToLower(secret)
		for _, in := range sent {
			if strings.Contains(in, secret) {
				continue secrets
			}
		}
		if strings.Contains(body, secret) {
			t.Errorf("%s: HTTP %d leaks %q: %s", what, a.Status, secret, a.raw)
		}
	}
}

// FuzzRequestBody sends arbitrary bodies, with an arbitrary Content-Type,
// to every endpoint that reads a body (and to the bodiless POSTs, which must
// ignore it).
func FuzzRequestBody(f *testing.F) {
	x := newFuzzFixture(f)
	type endpoint struct{ method, path, tok string }
	endpoints := []endpoint{
		{"POST", "/api/data/notifications", x.upstreamW1},
		{"POST", "/api/data/holidays", x.alice},
		{"PUT", "/api/data/holidays/" + x.holidayW1, x.bob}, // any user of w1 may rename
		{"PUT", "/api/data/resources/" + idOf("r-fuzz"), x.upstreamW1},
		{"POST", "/api/data/notifications/" + x.notifAlice + "/markread", x.alice},
		{"POST", "/api/data/notifications/" + x.notifAlice + "/markunread", x.alice},
		{"POST", "/api/data/notifications/markallread", x.alice},
		{"PUT", "/api/data/holidays/" + x.holidayW2, x.alice}, // another workspace's: never 200
	}
	const jsonCT = "application/json"
	seeds := []struct {
		ep   uint8
		ct   string
		body string
	}{
		{0, jsonCT, `{"recipientId":"alice","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"task.assigned","subject":"s","message":"m","data":{"taskId":"6f1c2b9e-3d4a-4e5f-8a7b-9c0d1e2f3a4b"}}`},
		{0, jsonCT, `{"recipientId":"alice","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"task.assigned","data":{"taskId":42,"k":"v"}}`},
		{0, jsonCT, `{"recipientId":"alice","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"t","data":null}`},
		{0, jsonCT, `{"recipientId":"alice","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"t","data":[1,2]}`},
		{0, jsonCT, `{"recipientId":"alice","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"t","subject":"\u0000"}`},
		{0, jsonCT, `{"recipientId":"alice","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"t","message":"a\u0000b"}`},
		{0, jsonCT, `{"recipientId":"alice","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"t","data":{"taskName":"\u0000"}}`},
		{0, jsonCT, `{"recipientId":"alice","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"\ud800"}`},
		{0, jsonCT, `{"recipientId":"../bob","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"t"}`},
		// What the read model refuses (issue 14): refused at the door.
		{0, jsonCT, `{"recipientId":"alice","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"t","data":{"taskName":"\ud800"}}`},
		{0, jsonCT, `{"recipientId":"alice","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"t","data":{"taskName":"\udc00\ud800"}}`},
		{0, jsonCT, `{"recipientId":"alice","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"t","data":{"taskName":1e999999}}`},
		{0, jsonCT, `{"recipientId":"alice","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"t","data":{"taskName":1e-16384}}`},
		{0, jsonCT, `{"recipientId":"alice","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"t","data":{"taskName":1.7976931348623157e308,"fileName":1e-400}}`},
		{0, jsonCT, `{"recipientId":"alice","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"t","data":{"taskName":"a","taskName":"b"}}`},
		{0, jsonCT, `{"recipientId":"alice","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"t","data":{"taskName":"\ud83d\ude00"}}`},
		{0, jsonCT, "{\"recipientId\":\"alice\",\"senderId\":\"bob\",\"notificationType\":\"t\",\"subject\":\"a\xffb\"}"},
		{0, jsonCT, "{\"recipientId\":\"alice\",\"senderId\":\"bob\",\"notificationType\":\"t\",\"message\":\"\xed\xa0\x80\"}"},
		{0, jsonCT, `{"recipientId":"alice","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"t","subject":"a","subject":"b"}`},
		{0, jsonCT, `{"recipientId":"alice","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"t"} {}`},
		{0, jsonCT, `{"recipientId":1}`},
		{0, "application/vnd.api+json; charset=utf-8", `{}`},
		{0, "text/plain", `{}`},
		{0, "", `{"recipientId":"alice","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"t"}`},
		{0, "application/json; charset=", `[]`},
		// The shared load generator's send: its ids named by their UUIDs.
		{0, jsonCT, `{"recipientId":"alice","senderId":"bob","notificationType":"task.assigned","subject":"New task","message":"Bob assigned you task 7","data":{"taskId":7}}`},
		{0, jsonCT, `{"recipientId":"alice","senderId":" bob","notificationType":"t","data":{"taskId":4.2,"projectId":"p-1","assigneeId":-1}}`},
		{1, jsonCT, `{"reason":"New Year","type":"global","dateFrom":"2028-01-01","dateTo":"2028-01-01"}`},
		{1, jsonCT, `{"reason":"Boxing","type":"country","dateFrom":"2028-12-26","dateTo":"2028-12-26","countryId":"GB"}`},
		{1, jsonCT, `{"reason":"Off","type":"people","dateFrom":"2028-03-01","dateTo":"2028-03-03","resources":[{"id":"` + idOf("r-de") + `"},"` + idOf("r-gb") + `"]}`},
		{1, jsonCT, `{"reason":"Long","type":"global","dateFrom":"2028-01-01","dateTo":"2029-01-01"}`},
		{1, jsonCT, `{"reason":"Backwards","type":"global","dateFrom":"2028-01-02","dateTo":"2028-01-01"}`},
		{1, jsonCT, `{"reason":"Leap","type":"global","dateFrom":"2028-02-29","dateTo":"2028-02-30"}`},
		{1, jsonCT, `{"reason":"Far","type":"global","dateFrom":"0001-01-01","dateTo":"0001-01-01"}`},
		{1, jsonCT, `{"reason":"Far","type":"global","dateFrom":"9999-12-31","dateTo":"9999-12-31"}`},
		{1, jsonCT, `{"reason":"Zero","type":"global","dateFrom":"0000-01-01","dateTo":"0000-01-01"}`},
		{1, jsonCT, `{"reason":"Nul","type":"country","dateFrom":"2028-01-01","dateTo":"2028-01-01","countryId":["\u0000"]}`},
		{1, jsonCT, `{"reason":"Nul","type":"people","dateFrom":"2028-01-01","dateTo":"2028-01-01","resources":["\u0000"]}`},
		{1, jsonCT, `{"reason":"x","type":"people","dateFrom":"2028-01-01","dateTo":"2028-01-01","resources":[{"id":1}]}`},
		{1, jsonCT, `{"reason":"Named","type":"people","dateFrom":"2028-01-01","dateTo":"2028-01-01","resources":["res-000",{"id":"RES-000"}]}`},
		{1, jsonCT, `{"reason":null,"type":"global"}`},
		{1, jsonCT, `{"type":{}}`},
		{2, jsonCT, `{"reason":"Renamed"}`},
		{2, jsonCT, `{"reason":"  "}`},
		{2, jsonCT, `{"reason":"a\u0000b"}`},
		{2, jsonCT, `{"reason":"` + strings.Repeat("é", 201) + `"}`},
		{2, jsonCT, `{"reason":null}`},
		{2, jsonCT, `{"reason":"Team \u202eyad fo ffo"}`},
		{2, jsonCT, `{"reason":"\u2066isolated\u2069"}`},
		{2, jsonCT, `{"reason":"\ud800"}`},
		{2, jsonCT, `{"reason":"A","reason":"B"}`},
		{1, jsonCT, `{"reason":"Fête \u202e","type":"global","dateFrom":"2028-01-01","dateTo":"2028-01-01"}`},
		{2, jsonCT, `{}`},
		{2, jsonCT, `null`},
		{2, jsonCT, `"reason"`},
		{2, jsonCT, ``},
		{2, jsonCT, "\xff\xfe{\"reason\":\"x\"}"},
		{3, jsonCT, `{"name":"Fuzz","countryCode":"gb","isActive":true,"isGuest":false}`},
		{3, jsonCT, `{"name":"Fuzz\u0000","countryCode":"GB","isActive":true}`},
		{3, jsonCT, `{"name":"Fuzz\u0000","countryCode":"GB","isActive":false}`},
		{3, jsonCT, `{"name":"Fuzz","countryCode":"XX"}`},
		{3, jsonCT, `{"name":"Fuzz","isActive":"yes"}`},
		{4, jsonCT, `{}`},
		{5, "", "garbage"},
		{6, "text/html", "<html>"},
		{7, jsonCT, `{"reason":"Pwned"}`},
	}
	for _, sd := range seeds {
		f.Add(sd.ep, sd.ct, []byte(sd.body))
	}
	f.Fuzz(func(t *testing.T, ep uint8, contentType string, body []byte) {
		if len(body) > fuzzMaxInput {
			return
		}
		e := endpoints[int(ep)%len(endpoints)]
		headers := []string{"Authorization", "Bearer " + e.tok}
		if contentType != "" {
			headers = append(headers, "Content-Type", contentType)
		}
		req, ok := fuzzRequest(x.s, e.method, e.path, body, headers...)
		if !ok {
			return
		}
		a := doChecked(t, x.s, req)
		what := e.method + " " + e.path
		if int(ep)%len(endpoints) == 7 && a.Status == 200 {
			t.Fatalf("%s: renamed another workspace's holiday: %s", what, a.raw)
		}
		if a.Status != 200 {
			return
		}
		// What a write answers, the next read sees (read-your-writes).
		switch e.path {
		case "/api/data/notifications":
			var sent struct{ ID string }
			var asked struct {
				RecipientID string `json:"recipientId"`
			}
			a.decode(t, &sent)
			if err := json.Unmarshal(body, &asked); err != nil {
				t.Fatalf("%s answered 200 to a body encoding/json refuses: %v", what, err)
			}
			get, _ := fuzzRequest(x.s, "GET", "/api/data/notifications?asFlatList=true", nil, "Authorization", "Bearer "+longToken(t, asked.RecipientID, "w1"))
			var page struct{ Items []struct{ ID string } }
			g := doChecked(t, x.s, get)
			g.decode(t, &page)
			if !slices.ContainsFunc(page.Items, func(n struct{ ID string }) bool { return n.ID == sent.ID }) {
				t.Fatalf("%s answered %s, but recipient %q does not see it: %s", what, a.raw, asked.RecipientID, g.raw)
			}
		case "/api/data/resources/" + idOf("r-fuzz"):
			// The global holiday of the fixture covers every active
			// non-guest resource of w1.
			var r struct{ IsActive, IsGuest bool }
			a.decode(t, &r)
			get, _ := fuzzRequest(x.s, "GET", "/api/data/holidays/resource?%24filter="+url.QueryEscape("resourceId eq '"+idOf("r-fuzz")+"'"), nil, "Authorization", "Bearer "+x.alice)
			var days []struct{ ResourceID string }
			g := doChecked(t, x.s, get)
			g.decode(t, &days)
			if want := r.IsActive && !r.IsGuest; (len(days) > 0) != want {
				t.Fatalf("%s answered %s, then the resource list has %d days of it: %s", what, a.raw, len(days), g.raw)
			}
		case "/api/data/holidays", "/api/data/holidays/" + x.holidayW1:
			var h struct{ ID, Reason string }
			a.decode(t, &h)
			get, ok := fuzzRequest(x.s, "GET", "/api/data/holidays/"+url.PathEscape(h.ID), nil, "Authorization", "Bearer "+x.alice)
			if !ok {
				t.Fatalf("%s answered an unusable id %q", what, h.ID)
			}
			var got struct{ ID, Reason string }
			g := doChecked(t, x.s, get)
			if g.Status != 200 {
				t.Fatalf("%s answered %s, then GET answers %d: %s", what, a.raw, g.Status, g.raw)
			}
			g.decode(t, &got)
			if got != h {
				t.Fatalf("%s answered %+v, GET answers %+v", what, h, got)
			}
		}
	})
}

// FuzzPathID puts arbitrary ids in every {id} position, escaped and raw.
func FuzzPathID(f *testing.F) {
	x := newFuzzFixture(f)
	type position struct {
		method, pattern string // %s is the id
		body            string
		upstream        bool // the caller needs the upstream token
	}
	positions := []position{
		{"GET", "/api/data/holidays/%s", "", false},
		{"GET", "/api/data/holidays/%s/history", "", false},
		{"PUT", "/api/data/holidays/%s", `{"reason":"Renamed by fuzz"}`, false},
		{"PUT", "/api/data/resources/%s", `{"name":"Fuzz","countryCode":"GB","isActive":true,"isGuest":false}`, true},
		{"POST", "/api/data/notifications/%s/markread", "", false},
		{"POST", "/api/data/notifications/%s/markunread", "", false},
		{"DELETE", "/api/data/notifications/delete/%s", "", false},
		{"GET", "/api/data/notifications/%s", "", false},  // unreadcount, count
		{"POST", "/api/data/notifications/%s", "", false}, // markallread
		{"GET", "/api/data/holidays/%s?asOf=2100-01-01T00:00:00Z", "", false},
		{"GET", "/api/data/holidays/%s/%s", "", false}, // both segments
	}
	unknown := "0193a6a2-7c5e-7000-8000-000000000000"
	ids := []string{
		"{H1}", "{H2}", "{N1}", "{N2}", unknown, "{H1U}", "{H1}/history", "{N1}/markread",
		"{H1U}/history", "{N1U}", "{N1U}/markread", strings.ToUpper(unknown),
		"global", "country", "resource", "unreadcount", "count", "markallread", "history",
		"", ".", "..", "%", "%00", "%2F", "a/b", "a b", "?", "#", "\x00", "\xff", "é", "r-gb",
		strings.Repeat("a", 65), strings.Repeat("9", 4000),
		"{" + unknown + "}", unknown + "/", unknown + "//", "urn:uuid:" + unknown,
		"00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff",
		"0193a6a2-7c5e-7000-8000-00000000000g", "0193a6a2+7c5e+7000+8000+000000000000",
		"res-000", " res-000", "RES-000", strings.Repeat("r", 201),
	}
	// Every id once, in turn at every position, escaped and raw, as alice
	// and as mallory; and alice's and mallory's own ids at every position.
	for i, id := range ids {
		f.Add(uint8(i), id, i%2 == 0, i%3 == 0)
	}
	// The notification stream answers GET /api/data/notifications/stream.
	f.Add(uint8(7), "stream", false, false)
	f.Add(uint8(7), "stream", false, true)
	for pos := range positions {
		for _, id := range []string{"{H1}", "{H2}", "{N1}", "{H1U}"} {
			f.Add(uint8(pos), id, false, false)
			f.Add(uint8(pos), id, false, true)
		}
	}
	f.Fuzz(func(t *testing.T, pos uint8, id string, raw, asMallory bool) {
		if len(id) > fuzzMaxInput {
			return
		}
		p := positions[int(pos)%len(positions)]
		id = x.expand(id)
		seg := url.PathEscape(id)
		if raw {
			seg = id
		}
		path := strings.ReplaceAll(p.pattern, "%s", seg)
		tok, who, secrets := x.alice, "alice", []string{}
		if asMallory {
			// Mallory, of w2, must never learn anything of w1.
			tok, who, secrets = x.mallory, "mallory", []string{x.w1Secret, x.aliceSecret}
		}
		if p.upstream {
			tok = x.upstreamW1
			if asMallory {
				tok = x.upstreamW2
			}
		}
		var body []byte
		headers := []string{"Authorization", "Bearer " + tok}
		if p.body != "" {
			body = []byte(p.body)
			headers = append(headers, "Content-Type", "application/json")
		}
		req, ok := fuzzRequest(x.s, p.method, path, body, headers...)
		if !ok {
			return
		}
		a := doChecked(t, x.s, req)
		what := who + ": " + p.method + " " + path
		noLeak(t, what, a, []string{id}, secrets...)
		if !asMallory || a.Status != 200 {
			return
		}
		// Mallory has no notifications, and only her own holiday.
		switch int(pos) % len(positions) {
		case 4, 5, 6:
			t.Fatalf("%s: mallory changed a notification: %s", what, a.raw)
		case 0, 1, 2, 9:
			if !strings.EqualFold(id, x.holidayW2) && !slices.Contains([]string{"global", "country", "resource"}, strings.Trim(id, "/")) {
				t.Fatalf("%s: mallory reached holiday %q: %s", what, id, a.raw)
			}
		}
	})
}

// FuzzQuery sends arbitrary query strings to the lists and reads: a raw
// query, plus one named parameter with an arbitrary (escaped) value. Bob
// must never see alice's notifications, nor w1 anything of w2's.
func FuzzQuery(f *testing.F) {
	x := newFuzzFixture(f)
	paths := []string{
		"/api/data/notifications",
		"/api/data/holidays/global",
		"/api/data/holidays/country",
		"/api/data/holidays/resource",
		"/api/data/holidays/" + x.holidayW1,
		"/api/data/holidays/" + x.holidayW2,
		"/api/data/holidays/" + x.holidayW1 + "/history",
		"/api/data/notifications/unreadcount",
		"/api/data/notifications/count",
	}
	params := []string{"$filter", "$orderby", "$top", "$skip", "asOf", "lastId", "senderId", "notificationTypes", "asFlatList"}
	type seed struct {
		path  uint8
		raw   string
		param uint8
		value string
	}
	const (
		pNotif, pGlobal, pCountry, pResource, pHoliday, pForeign           = 0, 1, 2, 3, 4, 5
		qFilter, qOrder, qTop, qSkip, qAsOf, qLast, qSender, qTypes, qFlat = 0, 1, 2, 3, 4, 5, 6, 7, 8
	)
	seeds := []seed{
		{pNotif, "", qFlat, "true"}, {pNotif, "", qFlat, "TRUE"}, {pNotif, "", qFlat, "maybe"},
		{pNotif, "asFlatList=1&asFlatList=0", qLast, "{N2}"},
		{pNotif, "", qLast, "{N1}"}, {pNotif, "", qLast, "not-a-uuid"}, {pNotif, "lastId={H1U}", qLast, ""},
		{pNotif, "", qSender, "carol"}, {pNotif, "", qSender, "\x00"}, {pNotif, "", qSender, "' OR 1=1 --"},
		{pNotif, "", qSender, "bob"}, {pNotif, "", qSender, " bob"}, {pNotif, "", qSender, "{" + idOf("bob") + "}"},
		{pResource, "", qFilter, "resourceId eq 'res-000' or resourceId ne 'r-gb' or resourceId gt 'r'"},
		{pNotif, "notificationTypes=a,b&notificationTypes=c", qTypes, "task.assigned"},
		{pNotif, "", qTypes, strings.Repeat(",", 1000)}, {pNotif, "", qTypes, "\x00,\xff"},
		{pNotif, "%zz&;&&=", qSender, ""},
		{pGlobal, "", qFilter, "date ge 2027-01-01"},
		{pCountry, "$orderby=date desc", qFilter, "date ge 2027-01-01 and countryId eq 'GB'"},
		{pCountry, "", qFilter, "countryId ne 'GB' or not (date lt '2027-01-01')"},
		{pCountry, "", qFilter, "countryId eq 2147483648"}, {pCountry, "", qFilter, "countryId gt -9999999999"},
		{pResource, "", qFilter, "resourceId eq 'r-gb' and id eq '{H1}'"},
		{pResource, "", qFilter, "id eq '{H2}'"},
		{pGlobal, "", qFilter, "reason eq '" + x.w1Secret + "' or 1 eq 1"},
		{pGlobal, "", qFilter, "reason eq 'it''s'"},
		{pGlobal, "", qFilter, "reason eq '\x00'"},
		{pGlobal, "", qFilter, "reason eq '\xff'"},
		{pGlobal, "", qFilter, "contains(reason,'Year') and startswith(reason,'New')"},
		{pGlobal, "", qFilter, "date eq 0000-00-00"}, {pGlobal, "", qFilter, "date eq 9999-12-31"},
		{pGlobal, "", qFilter, "date eq 2027-02-30"}, {pGlobal, "", qFilter, "date eq -2027-01-01"},
		{pGlobal, "", qFilter, "date eq null"}, {pGlobal, "", qFilter, "null eq date"},
		{pGlobal, "", qFilter, strings.Repeat("(", 5000) + "date eq 2027-01-01" + strings.Repeat(")", 5000)},
		{pGlobal, "", qFilter, strings.Repeat("not ", 3000) + "date eq 2027-01-01"},
		{pGlobal, "", qFilter, strings.TrimSuffix(strings.Repeat("date eq 2027-01-01 or ", 500), " or ")},
		{pGlobal, "", qFilter, "'"}, {pGlobal, "", qFilter, "date eq"}, {pGlobal, "", qFilter, ") or ("},
		{pGlobal, "", qFilter, "id eq 1"}, {pGlobal, "", qFilter, "date eq 99999999999999999999"},
		{pCountry, "", qOrder, "date desc, reason asc"}, {pCountry, "", qOrder, "foo"}, {pCountry, "", qOrder, "date desc desc"},
		{pCountry, "", qOrder, strings.TrimSuffix(strings.Repeat("date,", 1000), ",")},
		{pGlobal, "", qTop, "0"}, {pGlobal, "", qTop, "-1"}, {pGlobal, "", qTop, "99999999999999999999"}, {pGlobal, "", qTop, "1e3"},
		{pGlobal, "", qSkip, "9223372036854775807"}, {pGlobal, "", qSkip, "-5"}, {pGlobal, "$top=2147483647", qSkip, "2147483647"},
		{pHoliday, "", qAsOf, "2100-01-01T00:00:00Z"}, {pHoliday, "", qAsOf, "0001-01-01T00:00:00Z"},
		{pResource, "", qTop, "10"}, {pResource, "$top=10", qSkip, "100000"}, {pResource, "$orderby=date desc", qSkip, "2147483647"},
		{pHoliday, "", qAsOf, "9999-12-31T23:59:59.999999999+14:00"}, {pHoliday, "", qAsOf, "2027-01-01"},
		{pHoliday, "", qAsOf, "2027-01-01T00:00:00-23:59"}, {pHoliday, "", qAsOf, "0000-01-01T00:00:00Z"},
		{pForeign, "", qAsOf, "2100-01-01T00:00:00Z"}, {pForeign, "", qFilter, "1 eq 1"},
		{6, "", qTop, "1"}, {7, "", qSender, "x"}, {8, "", qFilter, "x"},
	}
	for _, sd := range seeds {
		f.Add(sd.path, sd.raw, sd.param, sd.value)
	}
	secretsW1Bob := []string{x.aliceSecret, x.notifAlice, "Mallory day", x.holidayW2}
	f.Fuzz(func(t *testing.T, pathIdx uint8, raw string, param uint8, value string) {
		if len(raw)+len(value) > fuzzMaxInput {
			return
		}
		path := paths[int(pathIdx)%len(paths)]
		raw, value = x.expand(raw), x.expand(value)
		q := raw
		if value != "" {
			if q != "" {
				q += "&"
			}
			q += url.QueryEscape(params[int(param)%len(params)]) + "=" + url.QueryEscape(value)
		}
		req, ok := fuzzRequest(x.s, "GET", path+"?"+q, nil, "Authorization", "Bearer "+x.bob)
		if !ok {
			return
		}
		a := doChecked(t, x.s, req)
		noLeak(t, "bob: GET "+path+"?"+q, a, []string{raw, value}, secretsW1Bob...)
		if path == paths[pForeign] && a.Status == 200 {
			t.Fatalf("bob read w2's holiday: GET %s?%s: %s", path, q, a.raw)
		}
	})
}

// FuzzHeaders sends arbitrary Authorization, Content-Type,
// x-integration-name, X-Request-Id and Idempotency-Key values. An empty
// Authorization input means the caller's valid token, so the other headers
// reach the handlers.
func FuzzHeaders(f *testing.F) {
	x := newFuzzFixture(f)
	type endpoint struct{ method, path, tok, body string }
	endpoints := []endpoint{
		{"GET", "/api/data/notifications/unreadcount", x.alice, ""},
		{"POST", "/api/data/notifications", x.upstreamW1, `{"recipientId":"alice","senderId":"0000bd20-0000-4000-8000-000000000006","notificationType":"t"}`},
		{"POST", "/api/data/holidays", x.alice, `{"reason":"Hdr","type":"global","dateFrom":"2028-01-01","dateTo":"2028-01-01"}`},
		{"PUT", "/api/data/holidays/" + x.holidayW1, x.alice, `{"reason":"%s"}`}, // %s: a fresh name, so the rename appends
		{"POST", "/api/data/notifications/markallread", x.alice, ""},
		{"PUT", "/api/data/resources/" + idOf("r-hdr"), x.upstreamW1, `{"name":"%s","countryCode":"GB","isActive":true}`},
	}
	validID := "0193a6a2-7c5e-7000-8000-000000000000"
	seeds := [][5]string{
		{"", "", "", "", ""},
		{"", "application/json", "walkthrough", validID, "key-1"},
		{"", "application/json; charset=utf-8", "sync", "req_1", "key-1"},
		{"", "application/json", "\xff\xfe", "\xff", "\xff"},
		{"", "application/json", strings.Repeat("é", 99), strings.Repeat("a", 64), strings.Repeat("k", 255)},
		{"", "application/json", strings.Repeat("a", 99) + "é", strings.Repeat("a", 65), strings.Repeat("k", 256)},
		{"", "application/json", "\t tab\t", "a b", " "},
		{"", "application/json", "", "", "\x7e\x20"},
		{"", "text/plain", "x", "x", "x"},
		{"", "multipart/form-data; boundary=x", "", "", ""},
		{"", ";;;", "", "", ""},
		{"", "application/json; charset=\"", "", "", ""},
		{"Bearer", "", "", "", ""},
		{"Bearer ", "", "", "", ""},
		{"bearer " + x.alice, "", "", "", ""},
		{"BEARER  " + x.alice + "  ", "", "", "", ""},
		{"Bearer " + x.alice + " extra", "", "", "", ""},
		{"Bearer\t" + x.alice, "", "", "", ""},
		{"Basic YWxpY2U6cHc=", "", "", "", ""},
		{"Bearer " + x.alice + "\u00a0", "", "", "", ""},
		{"Bearer " + strings.Repeat("a", 17<<10), "", "", "", ""},
		{"", "application/json", strings.Repeat("i", 7<<10), strings.Repeat("r", 7<<10), strings.Repeat("k", 7<<10)},
		{"Bearer a.b.c", "", "", "", ""},
		{"Bearer ..", "", "", "", ""},
		{"Bearer " + x.mallory, "", "", "", ""},
	}
	for ep := range endpoints {
		for _, sd := range seeds {
			f.Add(uint8(ep), sd[0], sd[1], sd[2], sd[3], sd[4])
		}
	}
	var n int
	f.Fuzz(func(t *testing.T, ep uint8, authz, contentType, integration, requestID, idemKey string) {
		e := endpoints[int(ep)%len(endpoints)]
		n++
		if authz == "" {
			authz = "Bearer " + e.tok
		}
		var body []byte
		if e.body != "" {
			body = []byte(strings.ReplaceAll(e.body, "%s", fmt.Sprintf("Name %d %d", time.Now().UnixNano(), n)))
		}
		headers := []string{"Authorization", authz}
		for _, h := range [][2]string{
			{"Content-Type", contentType}, {"x-integration-name", integration},
			{"X-Request-Id", requestID}, {"Idempotency-Key", idemKey},
		} {
			if h[1] != "" {
				headers = append(headers, h[0], h[1])
			}
		}
		req, ok := fuzzRequest(x.s, e.method, e.path, body, headers...)
		if !ok {
			return
		}
		a := doChecked(t, x.s, req)
		what := fmt.Sprintf("%s %s (Authorization %q, Content-Type %q, x-integration-name %q, X-Request-Id %q, Idempotency-Key %q)",
			e.method, e.path, authz, contentType, integration, requestID, idemKey)
		got := a.Header.Get("X-Request-Id")
		switch id := strings.Trim(requestID, " \t"); {
		case validRequestID(id) && got != id:
			t.Errorf("%s: X-Request-Id %q answered as %q", what, id, got)
		case !validRequestID(got):
			t.Errorf("%s: answered X-Request-Id %q", what, got)
		}
		replayed := a.Header.Get("Idempotent-Replayed") == "true" // the first answer, with its request id
		if !replayed && a.Error != nil && a.Error.TechnicalError != "" && !strings.HasSuffix(a.Error.TechnicalError, "request "+got) {
			t.Errorf("%s: technicalError %q does not quote the request id %q", what, a.Error.TechnicalError, got)
		}
		if a.Status == 200 && e.method == "PUT" && strings.HasPrefix(e.path, "/api/data/holidays/") {
			// The history holds whatever integration name was sent, and
			// stays readable.
			get, _ := fuzzRequest(x.s, "GET", e.path+"/history", nil, "Authorization", "Bearer "+x.alice)
			if h := doChecked(t, x.s, get); h.Status != 200 {
				t.Fatalf("%s: then GET history answers %d: %s", what, h.Status, h.raw)
			}
		}
	})
}

// validRequestID is what the server keeps of an X-Request-Id (1–64 of
// A-Z a-z 0-9 - _).
func validRequestID(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	return strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") == ""
}

// FuzzToken sends arbitrary tokens, and valid tokens with bytes flipped:
// anything but exactly a valid token is a 401.
func FuzzToken(f *testing.F) {
	x := newFuzzFixture(f)
	valid := map[string]bool{x.alice: true, x.bob: true, x.mallory: true, x.upstreamW1: true, x.upstreamW2: true}
	expired, _ := signWith(testSecret, "alice", "w1", time.Now().Add(-2*time.Hour), time.Hour)
	future, _ := signWith(testSecret, "alice", "w1", time.Now().Add(time.Hour), time.Hour)
	wrongKey, _ := signWith("another-secret-another-secret-another-secret", "alice", "w1", time.Now(), time.Hour)
	// Time claims as strings holding numbers (issue 14): RFC 7519 wants numbers.
	stringExp, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "alice", "workspace_id": "w1", "exp": "9999999999"}).SignedString([]byte(testSecret))
	stringNbf, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "alice", "workspace_id": "w1", "exp": 9999999999, "nbf": "1"}).SignedString([]byte(testSecret))
	parts := strings.Split(x.alice, ".")
	for _, tok := range []string{
		"", "garbage", "a.b.c", "..", "...", expired, future, wrongKey,
		"eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJhbGljZSIsIndvcmtzcGFjZV9pZCI6IncxIiwiZXhwIjo5OTk5OTk5OTk5fQ.",
		stringExp, stringNbf,
		parts[0] + "." + parts[1] + ".",
		parts[0] + "." + parts[1],
		parts[0] + "." + parts[1] + "." + parts[2] + "=",
		parts[0] + "=." + parts[1] + "." + parts[2],
		parts[0] + "." + parts[1] + "." + parts[2] + ".",
		x.alice + x.alice,
		strings.ToUpper(x.alice),
		x.alice + "\u00a0", "\u00a0" + x.alice, x.alice + "\u0085", x.alice + "\u3000",
		"\t" + x.alice, x.alice + "\t",
	} {
		f.Add(tok, false, uint16(0), byte(0))
	}
	for i := 0; i < len(x.alice); i += 7 {
		f.Add("", true, uint16(i), byte(1))
		f.Add("", true, uint16(i), byte(0x20))
	}
	f.Add("", true, uint16(len(x.alice)-1), byte(1)) // the last, partly padding, sextet
	f.Add("", true, uint16(len(x.alice)-1), byte(2))
	f.Add("", true, uint16(0), byte(0))
	f.Fuzz(func(t *testing.T, raw string, useValid bool, flipAt uint16, flip byte) {
		tok := []byte(raw)
		if useValid {
			tok = []byte(x.alice)
		}
		if flip != 0 && len(tok) > 0 {
			tok[int(flipAt)%len(tok)] ^= flip
		}
		authz := "Bearer " + string(tok)
		req, ok := fuzzRequest(x.s, "GET", "/api/data/notifications/unreadcount", nil, "Authorization", authz)
		if !ok {
			return
		}
		a := doChecked(t, x.s, req)
		// HTTP strips spaces and tabs around a field value (RFC 9110 5.5);
		// nothing else may make a token out of what is not one.
		exact := valid[strings.Trim(string(tok), " \t")]
		switch {
		case exact && a.Status != 200:
			t.Fatalf("valid token %q: HTTP %d: %s", tok, a.Status, a.raw)
		case !exact && a.Status != 401:
			t.Fatalf("Authorization %q: HTTP %d, want 401: %s", authz, a.Status, a.raw)
		}
	})
}
