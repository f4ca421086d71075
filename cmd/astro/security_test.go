package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"astro/api"
)

const (
	secIssuer   = "https://issuer.test"
	secAudience = "astro"
)

// secToken signs an HS256 token with the claims a service configured with
// secIssuer and secAudience accepts, after edit has changed them. A nil
// method means HS256 with testSecret.
func secToken(t testing.TB, user, ws string, scopes []string, edit func(jwt.MapClaims)) string {
	t.Helper()
	now := time.Now()
	claims := jwt.MapClaims{
		"sub": user, "workspace_id": ws, "iss": secIssuer, "aud": secAudience,
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	}
	if len(scopes) > 0 {
		claims["scope"] = strings.Join(scopes, " ")
	}
	if edit != nil {
		edit(claims)
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// secOutcome is what a cell of the matrix expects.
type secOutcome int

const (
	secUnauthorized secOutcome = iota // 401 with WWW-Authenticate
	secForbidden                      // 403: valid caller, missing privilege
	secNotFound                       // 404, answered exactly as for an unknown id
	secNoneOfAlice                    // 200 carrying nothing of alice's
	secAllowed                        // 200: holidays and resources are workspace-wide
	secOwner                          // 200 carrying alice's data: the control
)

func (o secOutcome) String() string {
	return [...]string{"401", "403", "404 as unknown", "200 without alice's data", "200 (workspace-wide)", "200 with alice's data"}[o]
}

// TestSecurityMatrix runs every endpoint with every kind of credential
// against data alice owns in w1, on a service that requires an issuer and
// an audience, then checks that alice's data is as it was.
func TestSecurityMatrix(t *testing.T) {
	s := startService(t, func(env map[string]string) {
		env["ASTRO_JWT_ISSUER"] = secIssuer
		env["ASTRO_JWT_AUDIENCE"] = secAudience
		env["ASTRO_RATE_LIMIT"] = "off" // a 429 would hide what a cell is about
	})
	all := []string{"notifications:send", "resources:write"}
	alice := secToken(t, "alice", "w1", nil, nil)
	aliceWriter := secToken(t, "alice", "w1", []string{"resources:write"}, nil)
	upstream := secToken(t, "svc-tasks", "w1", all, nil)

	// Alice's data: two unread notifications, a global and a country
	// holiday, and a resource (which the global holiday covers).
	const aliceSubject, aliceReason, countryReason = "alice-secret-subject-5d1e", "alice-secret-reason-0b7c", "alice-secret-country-reason-e2a4"
	resource := map[string]any{"name": "Alice A", "countryCode": "GB", "isActive": true, "isGuest": false}
	rAlice := idOf("r-alice")
	s.call("PUT", "/api/data/resources/"+rAlice, aliceWriter, resource).want(t, 200)
	var n1, n2 struct{ ID string }
	for _, n := range []*struct{ ID string }{&n1, &n2} {
		s.call("POST", "/api/data/notifications", upstream, map[string]any{
			"recipientId": "alice", "senderId": "0000ca20-0000-4000-8000-000000000003", "notificationType": "task.assigned",
			"subject": aliceSubject, "message": "m", "data": map[string]any{"taskId": taskID},
		}).want(t, 200).decode(t, n)
	}
	var h, hc struct{ ID string }
	s.call("POST", "/api/data/holidays", alice, map[string]any{"reason": aliceReason, "type": "global", "dateFrom": "2027-05-01", "dateTo": "2027-05-02"}).want(t, 200).decode(t, &h)
	s.call("POST", "/api/data/holidays", alice, map[string]any{"reason": countryReason, "type": "country", "dateFrom": "2027-08-01", "dateTo": "2027-08-01", "countryId": []string{"GB"}}).want(t, 200).decode(t, &hc)
	snapshot := func() map[string]string {
		t.Helper()
		out := map[string]string{}
		for _, p := range []string{
			"/api/data/notifications?asFlatList=true",
			"/api/data/notifications/unreadcount",
			"/api/data/holidays/" + h.ID,
			"/api/data/holidays/" + h.ID + "/history",
			"/api/data/holidays/" + hc.ID,
		} {
			out[p] = string(s.call("GET", p, alice, nil).want(t, 200).Data)
		}
		return out
	}
	before := snapshot()
	if !strings.Contains(before["/api/data/holidays/"+h.ID], `"`+rAlice+`"`) {
		t.Fatalf("the global holiday does not cover r-alice: %s", before["/api/data/holidays/"+h.ID])
	}

	// A row per operation of api/openapi.json that takes a bearer token,
	// keyed by the documented method and path: matrixRows fails the test
	// for an operation without a row, so an endpoint added without one
	// fails here. path has %s where an id goes; attack is the body an
	// intruder sends, harmless what an allowed caller of the same
	// workspace sends (changing nothing of alice's). The privilege an
	// operation needs is the document's.
	const unknownID = "0193a6a2-7c5e-7000-8000-000000000000"
	type endpoint struct {
		method, path string // method: the document's
		id           string // alice's id in the path, "" for none
		attack       any
		harmless     any
		scope        string // privilege it needs, "" for none: the document's
		notif        bool   // per user (notifications), not workspace-wide
		marker       string // what alice's own read must carry
	}
	send := func(to string) map[string]any {
		return map[string]any{"recipientId": to, "senderId": "0000a110-0000-4000-8000-000000000004", "notificationType": "phish", "subject": "click"}
	}
	asOf := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	rows := map[string][]endpoint{
		"GET /api/data/notifications":                  {{path: "/api/data/notifications?asFlatList=true", notif: true, marker: n1.ID}},
		"POST /api/data/notifications":                 {{path: "/api/data/notifications", attack: send("alice"), harmless: send("zed"), notif: true}},
		"GET /api/data/notifications/unreadcount":      {{path: "/api/data/notifications/unreadcount", notif: true, marker: `"unreadCount":2`}},
		"GET /api/data/notifications/count":            {{path: "/api/data/notifications/count", notif: true, marker: `"totalCount":2`}},
		"GET /api/data/notifications/stream":           {{path: "/api/data/notifications/stream", notif: true, marker: `"unreadCount":2`}},
		"POST /api/data/notifications/stream/ticket":   {{path: "/api/data/notifications/stream/ticket", notif: true}},
		"POST /api/data/notifications/markallread":     {{path: "/api/data/notifications/markallread", notif: true}},
		"POST /api/data/notifications/{id}/markread":   {{path: "/api/data/notifications/%s/markread", id: n1.ID, notif: true}},
		"POST /api/data/notifications/{id}/markunread": {{path: "/api/data/notifications/%s/markunread", id: n2.ID, notif: true}},
		"DELETE /api/data/notifications/deleteall":     {{path: "/api/data/notifications/deleteall", notif: true}},
		"DELETE /api/data/notifications/delete/{id}":   {{path: "/api/data/notifications/delete/%s", id: n2.ID, notif: true}},
		"POST /api/data/holidays": {{path: "/api/data/holidays", attack: map[string]any{"reason": "Pwned", "type": "global", "dateFrom": "2027-05-01", "dateTo": "2027-05-01"},
			harmless: map[string]any{"reason": "Bob's day", "type": "global", "dateFrom": "2027-05-01", "dateTo": "2027-05-01"}}},
		"GET /api/data/holidays/{id}": {
			{path: "/api/data/holidays/%s", id: h.ID, marker: aliceReason},
			{path: "/api/data/holidays/%s?asOf=" + asOf, id: h.ID, marker: aliceReason},
		},
		"GET /api/data/holidays/{id}/history": {{path: "/api/data/holidays/%s/history", id: h.ID, marker: aliceReason}},
		"PUT /api/data/holidays/{id}":         {{path: "/api/data/holidays/%s", id: h.ID, attack: map[string]any{"reason": "Pwned"}, harmless: map[string]any{"reason": aliceReason}}},
		"GET /api/data/holidays/global":       {{path: "/api/data/holidays/global", marker: h.ID}},
		"GET /api/data/holidays/country":      {{path: "/api/data/holidays/country", marker: hc.ID}},
		"GET /api/data/holidays/resource":     {{path: "/api/data/holidays/resource", marker: rAlice}},
		"PUT /api/data/resources/{id}":        {{path: "/api/data/resources/" + rAlice, attack: map[string]any{"name": "Pwned", "countryCode": "FR", "isActive": false, "isGuest": true}, harmless: resource}},
		// Erasure needs data:erase, which no credential here holds: every
		// valid caller is refused, and alice's data stays.
		"POST /api/data/erasure/users/{userId}": {{path: "/api/data/erasure/users/alice", notif: true}},
		"POST /api/data/erasure/workspace":      {{path: "/api/data/erasure/workspace"}},
	}
	var endpoints []endpoint
	for _, op := range securedOperations(t) {
		for _, e := range rows[op.key] {
			e.method, e.scope = op.method, op.scope
			endpoints = append(endpoints, e)
		}
		if _, ok := rows[op.key]; !ok {
			t.Errorf("%s is in api/openapi.json but has no row in the security matrix", op.key)
		}
		delete(rows, op.key)
	}
	for key := range rows {
		t.Errorf("the security matrix has a row for %s, which api/openapi.json does not document as taking a bearer token", key)
	}
	if t.Failed() {
		t.FailNow()
	}
	// What nobody but alice (and her workspace, for holidays) may see.
	notifSecrets := []string{n1.ID, n2.ID, aliceSubject}
	workspaceSecrets := append([]string{h.ID, hc.ID, aliceReason, countryReason, rAlice}, notifSecrets...)

	type credential struct {
		name   string
		authz  string                              // the whole Authorization header; "" sends none
		expect func(e endpoint) (secOutcome, bool) // false: the cell does not apply
	}
	bearer := func(tok string) string { return "Bearer " + tok }
	// lacks: the operation needs a privilege the other callers' tokens
	// (all) do not hold.
	lacks := func(e endpoint) bool { return e.scope != "" && !slices.Contains(all, e.scope) }
	refused := func(endpoint) (secOutcome, bool) { return secUnauthorized, true }
	other := func(tb testing.TB, user, ws string, edit func(jwt.MapClaims)) string {
		return bearer(secToken(tb, user, ws, all, edit))
	}
	algNone, err := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{
		"sub": "alice", "workspace_id": "w1", "iss": secIssuer, "aud": secAudience, "scope": strings.Join(all, " "),
		"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	wrongKey, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "alice", "workspace_id": "w1", "iss": secIssuer, "aud": secAudience, "scope": strings.Join(all, " "),
		"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString([]byte("another-secret-another-secret-another-secret"))
	if err != nil {
		t.Fatal(err)
	}
	credentials := []credential{
		{"no token", "", refused},
		{"garbage", "Bearer garbage", refused},
		{"wrong signature", bearer(wrongKey), refused},
		{"alg none", bearer(algNone), refused},
		{"expired", other(t, "alice", "w1", func(c jwt.MapClaims) {
			c["iat"], c["nbf"], c["exp"] = time.Now().Add(-3*time.Hour).Unix(), time.Now().Add(-3*time.Hour).Unix(), time.Now().Add(-2*time.Hour).Unix()
		}), refused},
		{"not yet valid", other(t, "alice", "w1", func(c jwt.MapClaims) {
			c["nbf"], c["exp"] = time.Now().Add(time.Hour).Unix(), time.Now().Add(2*time.Hour).Unix()
		}), refused},
		{"wrong issuer", other(t, "alice", "w1", func(c jwt.MapClaims) { c["iss"] = "https://evil.test" }), refused},
		{"wrong audience", other(t, "alice", "w1", func(c jwt.MapClaims) { c["aud"] = "not-astro" }), refused},
		{"no issuer", other(t, "alice", "w1", func(c jwt.MapClaims) { delete(c, "iss") }), refused},
		{"no audience", other(t, "alice", "w1", func(c jwt.MapClaims) { delete(c, "aud") }), refused},
		{"missing scope", bearer(alice), func(e endpoint) (secOutcome, bool) {
			return secForbidden, e.scope != ""
		}},
		{"another user", other(t, "bob", "w1", nil), func(e endpoint) (secOutcome, bool) {
			switch {
			case lacks(e):
				return secForbidden, true
			case e.notif && e.id != "":
				return secNotFound, true
			case e.notif && e.method == "POST" && e.scope != "":
				return secAllowed, true // sending is the privilege's, not the recipient's
			case e.notif:
				return secNoneOfAlice, true
			}
			return secAllowed, true
		}},
		{"another workspace", other(t, "alice", "w2", nil), func(e endpoint) (secOutcome, bool) {
			if lacks(e) {
				return secForbidden, true
			}
			if e.id != "" {
				return secNotFound, true
			}
			return secNoneOfAlice, true
		}},
		{"owner", bearer(alice), func(e endpoint) (secOutcome, bool) {
			return secOwner, e.marker != ""
		}},
	}

	request := func(t *testing.T, method, path, authz string, body any) fuzzAnswer {
		t.Helper()
		var raw []byte
		headers := []string{}
		if authz != "" {
			headers = append(headers, "Authorization", authz)
		}
		if body != nil {
			var err error
			if raw, err = json.Marshal(body); err != nil {
				t.Fatal(err)
			}
			headers = append(headers, "Content-Type", "application/json")
		}
		req, ok := fuzzRequest(s, method, path, raw, headers...)
		if !ok {
			t.Fatalf("cannot build %s %s", method, path)
		}
		return doChecked(t, s, req)
	}
	cells := 0
	for _, e := range endpoints {
		for _, c := range credentials {
			want, applies := c.expect(e)
			if !applies {
				continue
			}
			cells++
			path := e.path
			if e.id != "" {
				path = fmt.Sprintf(e.path, e.id)
			}
			t.Run(fmt.Sprintf("%s %s/%s", e.method, strings.ReplaceAll(e.path, "%s", "{id}"), c.name), func(t *testing.T) {
				body := e.attack
				if want == secAllowed && e.harmless != nil {
					body = e.harmless
				}
				a := request(t, e.method, path, c.authz, body)
				// What the answer carries: the envelope's data, or a
				// stream's first event.
				shown := a.Data
				if len(shown) == 0 {
					shown = []byte(a.raw)
				}
				rawBody, _ := json.Marshal(body)
				sent := []string{path, string(rawBody)}
				secrets := workspaceSecrets
				if c.name == "another user" {
					secrets = notifSecrets
				}
				switch want {
				case secUnauthorized, secForbidden:
					status := map[secOutcome]int{secUnauthorized: 401, secForbidden: 403}[want]
					if a.Status != status {
						t.Fatalf("HTTP %d, want %d: %s", a.Status, status, a.raw)
					}
					noLeakT(t, a, workspaceSecrets, sent...)
				case secNotFound:
					if a.Status != 404 {
						t.Fatalf("HTTP %d, want 404: %s", a.Status, a.raw)
					}
					u := request(t, e.method, fmt.Sprintf(e.path, unknownID), c.authz, body)
					if u.Status != a.Status || u.Error == nil || a.Error.Message != u.Error.Message {
						t.Fatalf("alice's id answers unlike an unknown one:\n%s\n%s", a.raw, u.raw)
					}
					noLeakT(t, a, workspaceSecrets, sent...)
				case secNoneOfAlice:
					if a.Status != 200 {
						t.Fatalf("HTTP %d, want 200: %s", a.Status, a.raw)
					}
					noLeakT(t, a, secrets, sent...)
					// Bob has no notifications at all. (Alice of w2 has
					// those the matrix sends her, so her counts are not 0.)
					for _, count := range []string{`"unreadCount":`, `"totalCount":`} {
						if c.name != "another user" {
							break
						}
						if bytes.Contains(shown, []byte(count)) && !bytes.Contains(shown, []byte(count+"0")) {
							t.Fatalf("counts another's notifications: %s", a.raw)
						}
					}
				case secAllowed:
					if a.Status != 200 {
						t.Fatalf("HTTP %d, want 200: %s", a.Status, a.raw)
					}
					if e.notif {
						noLeakT(t, a, notifSecrets, sent...)
					}
				case secOwner:
					if a.Status != 200 || !bytes.Contains(shown, []byte(e.marker)) {
						t.Fatalf("HTTP %d without %q: %s", a.Status, e.marker, a.raw)
					}
				}
			})
		}
	}
	t.Logf("%d endpoints × %d credentials: %d cells", len(endpoints), len(credentials), cells)

	after := snapshot()
	for p, was := range before {
		if after[p] != was {
			t.Errorf("alice's %s changed:\nbefore %s\nafter  %s", p, was, after[p])
		}
	}
}

// noLeakT fails when the answer carries any of secrets, except those the
// caller sent itself (in sent: the path and the body), which an answer may
// echo.
func noLeakT(t *testing.T, a fuzzAnswer, secrets []string, sent ...string) {
	t.Helper()
	for _, secret := range secrets {
		echo := false
		for _, in := range sent {
			echo = echo || strings.Contains(in, secret)
		}
		if !echo && bytes.Contains(a.raw, []byte(secret)) {
			t.Errorf("HTTP %d carries %q: %s", a.Status, secret, a.raw)
		}
	}
}

// TestSecurityIdempotencyReplay: an Idempotency-Key is scoped to the user,
// not to the token, so an answer kept for one request must not stand in
// for the answer another credential, or another Content-Type, is owed.
func TestSecurityIdempotencyReplay(t *testing.T) {
	s := startService(t, func(env map[string]string) { env["ASTRO_RATE_LIMIT"] = "off" })
	scoped := "Bearer " + token(t, "svc-tasks", "w1", "notifications:send", "resources:write")
	plain := "Bearer " + token(t, "svc-tasks", "w1")
	sendBody := []byte(`{"recipientId":"alice","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"t"}`)
	resourceBody := []byte(`{"name":"Ann","countryCode":"GB","isActive":true,"isGuest":false}`)
	// A fix may execute the retry, or refuse it as another request under
	// the same key (422); replaying the kept answer is the failure.
	type try struct {
		authz, contentType string
		want               []int
	}
	for _, c := range []struct {
		name         string
		method, path string
		body         []byte
		first, retry try
	}{
		{"send: a success is not replayed without the privilege", "POST", "/api/data/notifications", sendBody,
			try{scoped, "application/json", []int{200}}, try{plain, "application/json", []int{403, 422}}},
		{"resource: a success is not replayed without the privilege", "PUT", "/api/data/resources/" + idOf("r-1"), resourceBody,
			try{scoped, "application/json", []int{200}}, try{plain, "application/json", []int{403, 422}}},
		{"send: a refusal is not replayed once the privilege is held", "POST", "/api/data/notifications", sendBody,
			try{plain, "application/json", []int{403}}, try{scoped, "application/json", []int{200, 422}}},
		{"send: a 415 is not replayed to a JSON request", "POST", "/api/data/notifications", sendBody,
			try{scoped, "text/plain", []int{415}}, try{scoped, "application/json", []int{200, 422}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := "replay-" + strings.ReplaceAll(c.name, " ", "-")
			for i, tr := range []try{c.first, c.retry} {
				req, ok := fuzzRequest(s, c.method, c.path, c.body, "Authorization", tr.authz, "Content-Type", tr.contentType, "Idempotency-Key", key)
				if !ok {
					t.Fatal("cannot build the request")
				}
				if a := doChecked(t, s, req); !slices.Contains(tr.want, a.Status) {
					t.Fatalf("request %d: HTTP %d (Idempotent-Replayed %q), want one of %v: %s", i+1, a.Status, a.Header.Get("Idempotent-Replayed"), tr.want, a.raw)
				}
			}
		})
	}
}

// securedOperation is an operation of api/openapi.json that takes a bearer
// token.
type securedOperation struct {
	key, method string // key: "METHOD /path/{param}" as documented
	scope       string // the privilege it requires, "" for none
}

// securedOperations lists the operations of api/openapi.json whose
// security (their own, or the document's) asks for a bearer token, in
// path and method order.
func securedOperations(t testing.TB) []securedOperation {
	t.Helper()
	type requirement = []map[string][]string
	var doc struct {
		Security requirement                           `json:"security"`
		Paths    map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatalf("api/openapi.json: %v", err)
	}
	var out []securedOperation
	for _, path := range slices.Sorted(maps.Keys(doc.Paths)) {
		for _, method := range slices.Sorted(maps.Keys(doc.Paths[path])) {
			if !slices.Contains([]string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}, method) {
				continue // parameters, summary: not an operation
			}
			var op struct {
				Security *requirement `json:"security"`
			}
			if err := json.Unmarshal(doc.Paths[path][method], &op); err != nil {
				t.Fatalf("api/openapi.json: %s %s: %v", method, path, err)
			}
			sec := doc.Security
			if op.Security != nil {
				sec = *op.Security
			}
			for _, req := range sec {
				scopes, ok := req["bearerAuth"]
				if !ok {
					continue
				}
				m := strings.ToUpper(method)
				out = append(out, securedOperation{key: m + " " + path, method: m, scope: strings.Join(scopes, " ")})
				break
			}
		}
	}
	return out
}
