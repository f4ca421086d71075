package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/big"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"astro/api"
	"astro/api/natscmd"
	"astro/events"
)

// TestRefusedAtTheDoor: what the read model would refuse (PostgreSQL text
// and jsonb) is refused with 400 and the field, before anything is
// appended; before, it was accepted, appended, and parked by the projector.
func TestRefusedAtTheDoor(t *testing.T) {
	s := startService(t)
	svc := token(t, "svc", "w1", "notifications:send", "resources:write")
	alice := token(t, "alice", "w1")
	h := s.createHoliday(alice, map[string]any{"reason": "Kept", "type": "global", "dateFrom": "2027-01-01", "dateTo": "2027-01-01"})
	const send = `{"recipientId":"alice","senderId":"00005fc0-0000-4000-8000-000000000002","notificationType":"t",`
	cases := []struct {
		method, path, tok, body, field string
	}{
		{"POST", "/api/data/notifications", svc, send + `"data":{"taskName":"\ud800"}}`, "data"},
		{"POST", "/api/data/notifications", svc, send + `"data":{"taskName":"\udfff\ud800"}}`, "data"},
		{"POST", "/api/data/notifications", svc, send + `"data":{"\ud800":"a"}}`, "data"},
		{"POST", "/api/data/notifications", svc, send + `"data":{"taskName":1e999999}}`, "data"},
		{"POST", "/api/data/notifications", svc, send + `"data":{"taskName":1e-16384}}`, "data"},
		{"POST", "/api/data/notifications", svc, send + `"data":{"taskName":"a","taskName":"b"}}`, "data"},
		{"POST", "/api/data/notifications", svc, send + `"data":{"a":[{"x":1,"\u0078":2}]}}`, "data"},
		{"POST", "/api/data/notifications", svc, send + `"subject":"a\ud800b"}`, "subject"},
		{"POST", "/api/data/notifications", svc, send + "\"subject\":\"a\xffb\"}", "subject"},
		{"POST", "/api/data/notifications", svc, send + "\"message\":\"\xed\xa0\x80\"}", "message"},
		{"POST", "/api/data/notifications", svc, send + `"subject":"a","subject":"b"}`, "subject"},
		{"POST", "/api/data/holidays", alice, `{"reason":"\udc00","type":"global","dateFrom":"2027-02-01","dateTo":"2027-02-01"}`, "reason"},
		{"POST", "/api/data/holidays", alice, "{\"reason\":\"Fine\",\"type\":\"global\",\"dateFrom\":\"2027-02-01\",\"dateTo\":\"2027-02-01\",\"x\":\"\xc3\"}", "x"},
		{"PUT", "/api/data/holidays/" + h.ID, alice, "{\"reason\":\"Caf\xe9\"}", "reason"},
		{"PUT", "/api/data/holidays/" + h.ID, alice, `{"reason":"A","reason":"B"}`, "reason"},
		{"PUT", "/api/data/resources/" + idOf("r1"), svc, `{"name":"\ud800","countryCode":"GB","isActive":true}`, "name"},
	}
	before := len(s.logEvents(t))
	for _, c := range cases {
		env := s.call(c.method, c.path, c.tok, c.body)
		if env.Status != 400 || env.Error == nil || len(env.Error.ValidationErrors[c.field]) == 0 {
			t.Errorf("%s %s %q: HTTP %d, want 400 with validationErrors.%s: %s", c.method, c.path, c.body, env.Status, c.field, env.raw)
		}
	}
	// Over NATS the body is read without the HTTP decoder: data is checked
	// by the command itself.
	nc := s.connectNATS()
	for _, data := range []string{`{"taskName":"\ud800"}`, `{"taskName":1e999999}`, `{"taskName":"a","taskName":"b"}`, "{\"taskName\":\"\xff\"}"} {
		msg := nats.NewMsg(natscmd.SendSubject)
		msg.Data = []byte(`{"workspaceId":"w1",` + send[1:] + `"data":` + data + `}`)
		msg.Header.Set("Authorization", "Bearer "+svc)
		if env := natsRequest(t, nc, msg); env.StatusCode != "BadRequest" || env.Error == nil || len(env.Error.ValidationErrors["data"]) == 0 {
			t.Errorf("NATS data %q: %+v", data, env)
		}
	}
	if after := s.logEvents(t); len(after) != before {
		t.Fatalf("refused requests appended %d events: %+v", len(after)-before, after[before:])
	}
	if n := s.call("GET", "/api/data/notifications/count", alice, nil).want(t, 200); !bytes.Contains(n.Data, []byte(`"totalCount":0`)) {
		t.Fatalf("count: %s", n.raw)
	}
}

// TestWhatASendAcceptsIsServedUnchanged is a property over generated
// sends, hostile ones among them: whatever a send accepts, the read model
// stores and the list serves unchanged (numbers equal in value: jsonb
// writes 1e2 as 100), but for data's uuid fields, which are served as the
// UUIDs they name (namedData); whatever it refuses answers 400 with a
// field. Every accepted send is counted, so none was parked.
func TestWhatASendAcceptsIsServedUnchanged(t *testing.T) {
	s := startService(t)
	svc := token(t, "svc", "w1", "notifications:send")
	alice := token(t, "alice", "w1")
	seed := uint64(20261123)
	rnd := rand.New(rand.NewPCG(seed, seed))
	t.Logf("seed %d", seed)
	accepted, refused := 0, 0
	for i := range 150 {
		subject, message, data := genText(rnd), genText(rnd), genData(rnd)
		body := `{"recipientId":"alice","senderId":"00009e40-0000-4000-8000-000000000005","notificationType":"t","subject":` + subject +
			`,"message":` + message + `,"data":` + data + `}`
		env := s.call("POST", "/api/data/notifications", svc, body)
		switch env.Status {
		case 400:
			if env.Error == nil || len(env.Error.ValidationErrors) == 0 {
				t.Fatalf("send %d %q: 400 without validationErrors: %s", i, body, env.raw)
			}
			refused++
			continue
		case 200:
			accepted++
		default:
			t.Fatalf("send %d %q: HTTP %d: %s", i, body, env.Status, env.raw)
		}
		var sent struct{ ID string }
		env.decode(t, &sent)
		var page struct {
			Items []struct {
				ID, Subject, Message string
				Data                 json.RawMessage
			}
		}
		s.call("GET", "/api/data/notifications?asFlatList=true", alice, nil).want(t, 200).decode(t, &page)
		if len(page.Items) == 0 || page.Items[0].ID != sent.ID {
			t.Fatalf("send %d %q: accepted as %s, not listed first: %+v", i, body, sent.ID, page.Items)
		}
		got := page.Items[0]
		var wantSubject, wantMessage string
		if json.Unmarshal([]byte(subject), &wantSubject) != nil || json.Unmarshal([]byte(message), &wantMessage) != nil {
			t.Fatalf("send %d %q: accepted text encoding/json refuses", i, body)
		}
		if got.Subject != wantSubject || got.Message != wantMessage {
			t.Fatalf("send %d %q: served subject %q message %q", i, body, got.Subject, got.Message)
		}
		if want := namedData(t, []byte(data)); !sameJSON(t, want, got.Data) {
			t.Fatalf("send %d: sent data %s, served %s, want %s", i, data, got.Data, want)
		}
	}
	t.Logf("%d accepted, %d refused", accepted, refused)
	if accepted < 10 || refused < 10 {
		t.Fatalf("the generator is lopsided: %d accepted, %d refused", accepted, refused)
	}
	var count struct{ TotalCount int }
	s.call("GET", "/api/data/notifications/count", alice, nil).want(t, 200).decode(t, &count)
	if count.TotalCount != accepted {
		t.Fatalf("%d sends accepted, %d counted: some were parked", accepted, count.TotalCount)
	}
}

// textParts are what generated strings are made of: plain and tricky
// text, escapes of all kinds, and what PostgreSQL refuses (lone surrogates,
// NUL, invalid UTF-8).
var textParts = []string{
	"a", "Task 42", " ", "é", "😀", "\u202e", "日本", `\"`, `\\`, `\/`, `\n`, `\t`, `\u00e9`,
	`\ud83d\ude00`, `\u0041`, `\ud800`, `\udfff`, `\u0000`, "\xff", "\xc3", "\xed\xa0\x80",
}

func genText(rnd *rand.Rand) string {
	var b strings.Builder
	b.WriteByte('"')
	for range rnd.IntN(4) {
		p := textParts[rnd.IntN(len(textParts))]
		if rnd.IntN(4) != 0 && p != "a" && len(p) < 3 || !utf8.ValidString(p) && rnd.IntN(3) != 0 {
			p = "a" // mostly clean, so both outcomes are common
		}
		b.WriteString(p)
	}
	b.WriteByte('"')
	return b.String()
}

// dataKeys are the keys of generated data: NotificationDataDto's fields,
// one of them escaped, and keys it does not have.
var dataKeys = []string{`"taskId"`, `"projectId"`, `"assigneeId"`, `"taskName"`, `"projectName"`, `"fileName"`,
	`"view"`, `"task\u004eame"`, `"k"`, `"\ud800"`, `""`}

var dataValues = []string{"null", `"123e4567-e89b-12d3-a456-426614174000"`, `"123E4567-E89B-12D3-A456-426614174000"`,
	`"42"`, "42", "1e999999", "true", `{"k":"v"}`, `["a"]`}

// genData is a data object: mostly what NotificationDataDto allows, with
// hostile text, now and then a key or value it does not allow, a duplicate
// or a number no double holds.
func genData(rnd *rand.Rand) string {
	n := rnd.IntN(4)
	members := make([]string, 0, n)
	used := map[string]bool{}
	for range n {
		k := dataKeys[rnd.IntN(len(dataKeys))]
		if rnd.IntN(3) != 0 {
			k = dataKeys[rnd.IntN(7)] // mostly known fields
		}
		if used[k] && rnd.IntN(3) != 0 {
			continue // duplicates now and then, not always
		}
		used[k] = true
		v := genText(rnd)
		switch {
		case strings.HasSuffix(k, `Id"`) && rnd.IntN(4) != 0:
			v = dataValues[1+rnd.IntN(2)]
		case rnd.IntN(5) == 0:
			v = dataValues[rnd.IntN(len(dataValues))]
		}
		members = append(members, k+":"+v)
	}
	return "{" + strings.Join(members, ",") + "}"
}

// namedData is the data of an accepted send as it is stored: the uuid
// fields of NotificationDataDto as UUIDs (a UUID lower-cased, another
// string or an integer, by its text, as its name-based UUID), the rest as
// sent.
func namedData(t *testing.T, data []byte) []byte {
	t.Helper()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil || fields == nil {
		return data
	}
	for _, k := range []string{"taskId", "projectId", "assigneeId"} {
		raw, ok := fields[k]
		if !ok || string(raw) == "null" {
			continue
		}
		var name string
		if json.Unmarshal(raw, &name) != nil {
			name = string(raw) // an integer, named by its text
		}
		id, ok := events.UUIDFor(name)
		if !ok {
			t.Fatalf("data %s was accepted with %s %s, which names no UUID", data, k, raw)
		}
		fields[k], _ = json.Marshal(id)
	}
	out, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sameJSON compares two documents as values, numbers by exact value.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	decode := func(doc []byte) any {
		d := json.NewDecoder(bytes.NewReader(doc))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("decode %s: %v", doc, err)
		}
		return normalize(v)
	}
	if len(b) == 0 {
		b = []byte("null")
	}
	va, vb := decode(a), decode(b)
	if m, ok := va.(map[string]any); ok && len(m) == 0 && vb == nil {
		return true // an empty object is served as no data
	}
	return reflect.DeepEqual(va, vb)
}

// normalize makes numbers comparable by value.
func normalize(v any) any {
	switch v := v.(type) {
	case json.Number:
		r, ok := new(big.Rat).SetString(string(v))
		if !ok {
			return "bad number " + string(v)
		}
		return r.RatString()
	case map[string]any:
		for k, x := range v {
			v[k] = normalize(x)
		}
	case []any:
		for i, x := range v {
			v[i] = normalize(x)
		}
	}
	return v
}

// TestUpperCaseIDs: a holiday id in upper case worked on GET and PUT and
// answered 404 on /history and ?asOf= (the log subject was built from the
// id as sent). Ids are normalised once, at the boundary, for every path.
func TestUpperCaseIDs(t *testing.T) {
	s := startService(t)
	alice := token(t, "alice", "w1")
	svc := token(t, "svc", "w1", "notifications:send")
	h := s.createHoliday(alice, map[string]any{"reason": "Before", "type": "global", "dateFrom": "2027-01-01", "dateTo": "2027-01-01"})
	up := strings.ToUpper(h.ID)
	before := time.Now().UTC().Format(time.RFC3339Nano)
	s.call("PUT", "/api/data/holidays/"+up, alice, map[string]any{"reason": "After"}).want(t, 200)
	var got struct{ ID, Reason string }
	s.call("GET", "/api/data/holidays/"+up, alice, nil).want(t, 200).decode(t, &got)
	if got.ID != h.ID || got.Reason != "After" {
		t.Fatalf("GET %s: %+v", up, got)
	}
	s.call("GET", "/api/data/holidays/"+up+"/history", alice, nil).want(t, 200)
	s.call("GET", "/api/data/holidays/"+up+"?asOf="+before, alice, nil).want(t, 200).decode(t, &got)
	if got.ID != h.ID || got.Reason != "Before" {
		t.Fatalf("GET %s?asOf=%s: %+v", up, before, got)
	}
	n := s.send(svc, "alice", "bob", "t")
	s.call("POST", "/api/data/notifications/"+strings.ToUpper(n.ID)+"/markread", alice, nil).want(t, 200)
	if u := s.unread(alice); u != 0 {
		t.Fatalf("marked read by its upper-case id, %d unread", u)
	}
	s.call("DELETE", "/api/data/notifications/delete/"+strings.ToUpper(n.ID), alice, nil).want(t, 200)
	// Resource ids are UUIDs too: the upper-case id is the same resource,
	// one event for the two identical upserts.
	up2 := token(t, "svc", "w1", "resources:write")
	r1 := idOf("r1")
	s.call("PUT", "/api/data/resources/"+strings.ToUpper(r1), up2, map[string]any{"name": "Same", "countryCode": "GB", "isActive": true}).want(t, 200)
	s.call("PUT", "/api/data/resources/"+r1, up2, map[string]any{"name": "Same", "countryCode": "GB", "isActive": true}).want(t, 200)
	if upserts := s.logEvents(t, "ResourceUpserted"); len(upserts) != 1 {
		t.Fatalf("%d ResourceUpserted for one resource named in two cases, want 1", len(upserts))
	}
}

// TestOptionsAndOversizedHeaders: OPTIONS answered 405 while its own Allow
// listed OPTIONS; a URL or header over 64 KiB got Go's plain-text 431.
func TestOptionsAndOversizedHeaders(t *testing.T) {
	s := startService(t)
	alice := token(t, "alice", "w1")
	// Straight to the server: OPTIONS and 431 are outside api/openapi.json,
	// which the harness's client holds every exchange to.
	do := func(method, path string, header http.Header) (int, http.Header, envelope) {
		t.Helper()
		req, err := http.NewRequest(method, s.base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		maps.Copy(req.Header, header)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		env := envelope{Status: resp.StatusCode, Header: resp.Header, raw: raw}
		if err := json.Unmarshal(raw, &env); err != nil {
			t.Fatalf("%s %.80s: HTTP %d, not an envelope: %.200q", method, path, resp.StatusCode, raw)
		}
		checkEnvelope(t, method+" "+path, env)
		return resp.StatusCode, resp.Header, env
	}
	for path, want := range map[string][]string{
		"/api/data/holidays/0193a6a2-7c5e-7000-8000-000000000000": {"GET", "PUT", "OPTIONS"},
		"/api/data/notifications":                                 {"GET", "POST", "OPTIONS"},
	} {
		status, h, _ := do("OPTIONS", path, nil)
		allow := h.Get("Allow")
		if status != 200 {
			t.Errorf("OPTIONS %s: HTTP %d", path, status)
		}
		for _, m := range want {
			if !strings.Contains(allow, m) {
				t.Errorf("OPTIONS %s: Allow %q lacks %s", path, allow, m)
			}
		}
	}
	if status, _, _ := do("OPTIONS", "/nowhere", nil); status != 404 {
		t.Errorf("OPTIONS /nowhere: HTTP %d", status)
	}
	// Slashes alone are the root, not an empty path the answer cannot name.
	if status, _, env := do("GET", "//", nil); status != 404 || !strings.Contains(string(env.raw), "No such endpoint: /.") {
		t.Errorf("GET //: HTTP %d: %s", status, env.raw)
	}
	// A generated client joins a base URL ending in "/" and a path.
	for _, path := range []string{"//api/data/notifications/unreadcount", "/api//data/notifications/unreadcount//"} {
		if status, _, env := do("GET", path, http.Header{"Authorization": {"Bearer " + alice}}); status != 200 {
			t.Errorf("GET %s: HTTP %d: %s", path, status, env.raw)
		}
	}

	big := strings.Repeat("a", 70<<10)
	for name, req := range map[string]struct {
		path   string
		header http.Header
	}{
		"long URL":    {"/api/data/notifications/unreadcount?x=" + big, http.Header{"Authorization": {"Bearer " + alice}}},
		"long header": {"/api/data/notifications/unreadcount", http.Header{"Authorization": {"Bearer " + alice}, "X-Big": {big}}},
		"many headers": {"/api/data/notifications/unreadcount", func() http.Header {
			h := http.Header{"Authorization": {"Bearer " + alice}}
			for i := range 2000 {
				h.Set(fmt.Sprintf("X-H%d", i), strings.Repeat("b", 40))
			}
			return h
		}()},
	} {
		status, _, env := do("GET", req.path, req.header)
		if status != 431 || env.StatusCode != "RequestHeaderFieldsTooLarge" {
			t.Errorf("%s: HTTP %d: %.300s", name, status, env.raw)
		}
	}
	// Just under the limit is served.
	if status, _, env := do("GET", "/api/data/notifications/unreadcount?x="+strings.Repeat("a", 60<<10), http.Header{"Authorization": {"Bearer " + alice}}); status != 200 {
		t.Errorf("60 KiB URL: HTTP %d: %.300s", status, env.raw)
	}
}

// TestWorkspaceHolidayBudget: any member could create people holidays of
// 1,000 resources for 366 days without end, and twenty made the lists of
// the whole workspace crawl. A workspace's people holidays are bounded in
// resource-days; past the bound a create answers 422, and other workspaces
// are not affected.
// thousandResources names the most resources a holiday may have.
func thousandResources() []string {
	resources := make([]string, 1000)
	for i := range resources {
		resources[i] = idOf(fmt.Sprintf("r%04d", i))
	}
	return resources
}

// sabbatical is the largest people holiday: 366,000 resource-days.
func sabbatical(resources []string) map[string]any {
	return map[string]any{"reason": "Sabbatical", "type": "people", "dateFrom": "2028-01-01", "dateTo": "2028-12-31", "resources": resources}
}

// Creates of one workspace sent at once are counted against its budget as
// if sent one by one: each would otherwise read the budget without the
// others and pass it together.
func TestConcurrentCreatesKeepTheBudget(t *testing.T) {
	createsKeepTheBudget(t, 16, startService(t))
}

// So are creates sent at once to two instances on one log and one
// database, each running its own one at a time: a create lands only while
// the workspace's last holiday event is the one its count was made at
// (TestCreatesAfterTheBudgetsPosition, in commands, makes the race).
func TestConcurrentCreatesOnTwoInstancesKeepTheBudget(t *testing.T) {
	a := startService(t)
	env := maps.Clone(a.env)
	env["ASTRO_DATA_DIR"] = t.TempDir()
	createsKeepTheBudget(t, 8, a, startWithEnv(t, env))
}

// createsKeepTheBudget sends n creates of 366,000 resource-days at once,
// spread over instances, against a budget of 1,000,000: two fit.
func createsKeepTheBudget(t *testing.T, n int, instances ...*service) {
	t.Helper()
	alice := token(t, "alice", "w1")
	big := sabbatical(thousandResources())
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = instances[i%len(instances)].callRaw(t, "POST", "/api/data/holidays", alice, big).Status
		}()
	}
	wg.Wait()
	count := map[int]int{}
	for _, st := range statuses {
		count[st]++
	}
	if count[200] != 2 || count[200]+count[422] != n {
		t.Fatalf("%d concurrent creates of 366,000 resource-days against a budget of 1,000,000: %v (status: count), want 2 created and the rest 422", n, count)
	}
	if created := instances[0].logEvents(t, "HolidayCreated"); len(created) != 2 {
		t.Fatalf("%d holidays created, want 2", len(created))
	}
}

func TestWorkspaceHolidayBudget(t *testing.T) {
	s := startService(t)
	alice := token(t, "alice", "w1")
	resources := thousandResources()
	big := sabbatical(resources)
	for range 2 { // 732,000 resource-days
		s.call("POST", "/api/data/holidays", alice, big).want(t, 200)
	}
	env := s.call("POST", "/api/data/holidays", alice, big) // 1,098,000
	if env.Status != 422 || !strings.Contains(env.Error.Message, "resource-days") {
		t.Fatalf("over the workspace's budget: HTTP %d: %s", env.Status, env.raw)
	}
	// What still fits, fits; global holidays are not people holidays.
	small := map[string]any{"reason": "Offsite", "type": "people", "dateFrom": "2028-01-01", "dateTo": "2028-01-10", "resources": resources}
	s.call("POST", "/api/data/holidays", alice, small).want(t, 200)
	s.call("POST", "/api/data/holidays", alice, map[string]any{"reason": "New Year", "type": "global", "dateFrom": "2028-01-01", "dateTo": "2028-01-01"}).want(t, 200)
	s.call("POST", "/api/data/holidays", token(t, "mallory", "w2"), big).want(t, 200)
	if created := s.logEvents(t, "HolidayCreated"); len(created) != 5 {
		t.Fatalf("%d holidays created, want 5", len(created))
	}

	// Global and country holidays are bounded in days, a country
	// holiday's once per country: 1 held, 30 countries × 366 days twice
	// would be 21,961, over 20,000.
	countries := []string{"AT", "BE", "BG", "HR", "CY", "CZ", "DK", "EE", "FI", "FR", "DE", "GR", "HU", "IE", "IT",
		"LV", "LT", "LU", "MT", "NL", "PL", "PT", "RO", "SK", "SI", "ES", "SE", "GB", "NO", "CH"}
	year := map[string]any{"reason": "Every day", "type": "country", "dateFrom": "2028-01-01", "dateTo": "2028-12-31", "countryId": countries}
	s.call("POST", "/api/data/holidays", alice, year).want(t, 200)
	env = s.call("POST", "/api/data/holidays", alice, year)
	if env.Status != 422 || !strings.Contains(env.Error.Message, "days of global and country holidays") {
		t.Fatalf("over the workspace's holiday days: HTTP %d: %s", env.Status, env.raw)
	}
	long := map[string]any{"reason": "Forever", "type": "global", "dateFrom": "2029-01-01", "dateTo": "2029-12-31"}
	for range 24 { // 10,981 + 24 × 365 = 19,741
		s.call("POST", "/api/data/holidays", alice, long).want(t, 200)
	}
	s.call("POST", "/api/data/holidays", alice, long).want(t, 422)
	s.call("POST", "/api/data/holidays", token(t, "mallory", "w2"), year).want(t, 200)
}

// TestUnparsableQueryIsRefused: a pair with a raw ';' or a bad percent
// escape was dropped by the handlers' url.Values, and the read answered
// without it: the whole list for a $filter, today's holiday for an asOf,
// every sender for a senderId.
func TestUnparsableQueryIsRefused(t *testing.T) {
	s := startService(t)
	alice := token(t, "alice", "w1")
	h := s.createHoliday(alice, map[string]any{"reason": "New Year", "type": "global", "dateFrom": "2027-01-01", "dateTo": "2027-01-01"})
	for path, field := range map[string]string{
		"/api/data/holidays/global?$filter=date%20eq%202099-01-01;":   "$filter",
		"/api/data/holidays/global?$filter=date%20eq%202099-01-01%zz": "$filter",
		"/api/data/holidays/" + h.ID + "?asOf=2000-01-01T00:00:00Z%":  "asOf",
		"/api/data/holidays/" + h.ID + "?asOf=2000-01-01T00:00:00Z;":  "asOf",
		"/api/data/notifications?senderId=nobody%":                    "senderId",
		"/api/data/holidays/global?%zz=1":                             "",
	} {
		env := s.call(http.MethodGet, path, alice, nil)
		if env.Status != http.StatusBadRequest || env.Error == nil {
			t.Errorf("%s: HTTP %d, want 400: %s", path, env.Status, env.raw)
			continue
		}
		if field != "" && len(env.Error.ValidationErrors[field]) == 0 {
			t.Errorf("%s: want validationErrors.%s: %s", path, field, env.raw)
		}
	}
}

// TestSingletonHeaderGivenTwiceIsRefused: of two Authorization,
// Idempotency-Key, Content-Type or X-Astro-Min-Position headers the first
// was read without a word, while a proxy in front may have checked the
// other (another user's token, another key). Two that differ are 400.
func TestSingletonHeaderGivenTwiceIsRefused(t *testing.T) {
	s := startService(t)
	alice := token(t, "alice", "w1")
	bob := token(t, "bob", "w2")
	const create = `{"reason":"Twice","type":"global","dateFrom":"2027-03-01","dateTo":"2027-03-01"}`
	for _, tc := range []struct {
		name, method, path, body string
		header                   http.Header
		status                   int
	}{
		{"two tokens", "GET", "/api/data/notifications/count", "",
			http.Header{"Authorization": {"Bearer " + bob, "Bearer " + alice}}, 400},
		{"the token twice", "GET", "/api/data/notifications/count", "",
			http.Header{"Authorization": {"Bearer " + alice, "Bearer " + alice}}, 200},
		{"two positions", "GET", "/api/data/holidays/global", "",
			http.Header{"Authorization": {"Bearer " + alice}, "X-Astro-Min-Position": {"0", "abc"}}, 400},
		{"two types", "POST", "/api/data/holidays", create,
			http.Header{"Authorization": {"Bearer " + alice}, "Content-Type": {"application/json", "text/plain"}}, 400},
		{"two keys", "POST", "/api/data/holidays", create,
			http.Header{"Authorization": {"Bearer " + alice}, "Content-Type": {"application/json"}, "Idempotency-Key": {"k1", "k2"}}, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, s.base+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header = tc.header
			resp, err := s.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var env envelope
			if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
				t.Fatalf("HTTP %d, not an envelope: %v", resp.StatusCode, err)
			}
			if resp.StatusCode != tc.status || env.StatusCode != api.StatusName(tc.status) {
				t.Fatalf("HTTP %d %s, want %d", resp.StatusCode, env.StatusCode, tc.status)
			}
			if tc.status == 400 && env.Error == nil || env.Error != nil && len(env.Error.ValidationErrors) != 1 {
				t.Errorf("want the header in validationErrors: %+v", env.Error)
			}
		})
	}
	if evs := s.logEvents(t, "HolidayCreated"); len(evs) != 0 {
		t.Errorf("%d holidays created by refused requests", len(evs))
	}
}
