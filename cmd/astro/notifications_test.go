package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

type notificationDto struct {
	ID               string            `json:"id"`
	SenderID         string            `json:"senderId"`
	Children         []notificationDto `json:"children"`
	NotificationType string            `json:"notificationType"`
	CreateDate       time.Time         `json:"createDate"`
	Subject          string            `json:"subject"`
	Message          string            `json:"message"`
	ReadDate         *time.Time        `json:"readDate"`
	Data             map[string]any    `json:"data"`
}

type notificationPage struct {
	Items       []notificationDto `json:"items"`
	TotalCount  int               `json:"totalCount"`
	UnreadCount int               `json:"unreadCount"`
}

const sendPath = "/api/data/notifications"

// taskID is the data.taskId of sent notifications: NotificationDataDto's
// ids are uuids.
const taskID = "6f1c2b9e-3d4a-4e5f-8a7b-9c0d1e2f3a4b"

// sender returns a token allowed to send in ws.
func sender(t testing.TB, ws string) string { return token(t, "svc-tasks", ws, "notifications:send") }

// idOf is the UUID that stands for the sender or resource called name:
// the public document names users and resources by UUID.
func idOf(name string) string {
	h := sha256.Sum256([]byte(name))
	x := hex.EncodeToString(h[:16])
	return x[0:8] + "-" + x[8:12] + "-4" + x[13:16] + "-8" + x[17:20] + "-" + x[20:32]
}

// send sends a notification from the sender called from (see idOf).
func (s *service) send(tok, recipient, from, typ string) notificationDto {
	s.t.Helper()
	var n notificationDto
	s.call("POST", sendPath, tok, map[string]any{
		"recipientId": recipient, "senderId": idOf(from), "notificationType": typ,
		"subject": "Task assigned", "message": "You have a new task", "data": map[string]any{"taskId": taskID},
	}).want(s.t, 200).decode(s.t, &n)
	return n
}

func (s *service) unread(tok string) int {
	s.t.Helper()
	var c struct{ UnreadCount int }
	s.call("GET", "/api/data/notifications/unreadcount", tok, nil).want(s.t, 200).decode(s.t, &c)
	return c.UnreadCount
}

func (s *service) page(tok, query string) notificationPage {
	s.t.Helper()
	var p notificationPage
	s.call("GET", "/api/data/notifications"+query, tok, nil).want(s.t, 200).decode(s.t, &p)
	return p
}

func TestNotificationLifecycle(t *testing.T) {
	s := startService(t)
	alice := token(t, "alice", "w1")
	svc := sender(t, "w1")

	if n := s.unread(alice); n != 0 {
		t.Fatalf("unread before any send: %d", n)
	}
	n1 := s.send(svc, "alice", "bob", "task")
	if n1.ID == "" || n1.SenderID != idOf("bob") || n1.ReadDate != nil || n1.Data["taskId"] != taskID {
		t.Fatalf("sent: %+v", n1)
	}
	n2 := s.send(svc, "alice", "carol", "comment")
	if got := s.unread(alice); got != 2 {
		t.Fatalf("unread after two sends: %d", got)
	}

	var ts struct{ Timestamp time.Time }
	s.call("POST", "/api/data/notifications/"+n1.ID+"/markread", alice, nil).want(t, 200).decode(t, &ts)
	if ts.Timestamp.IsZero() {
		t.Fatal("markread without timestamp")
	}
	if got := s.unread(alice); got != 1 {
		t.Fatalf("unread after markread: %d", got)
	}
	// Marking read again keeps the first read date.
	var again struct{ Timestamp time.Time }
	s.call("POST", "/api/data/notifications/"+n1.ID+"/markread", alice, nil).want(t, 200).decode(t, &again)
	if !again.Timestamp.Equal(ts.Timestamp) {
		t.Fatalf("second markread changed the date: %v then %v", ts.Timestamp, again.Timestamp)
	}
	// The public document's AstroResult: no data.
	if env := s.call("POST", "/api/data/notifications/"+n1.ID+"/markunread", alice, nil).want(t, 200); env.Data != nil {
		t.Fatalf("markunread answered data: %s", env.Data)
	}
	if got := s.unread(alice); got != 2 {
		t.Fatalf("unread after markunread: %d", got)
	}

	env := s.call("DELETE", "/api/data/notifications/delete/"+n2.ID, alice, nil).want(t, 200)
	if env.Data != nil {
		t.Fatalf("delete answered data: %s", env.Data)
	}
	var total struct{ TotalCount int }
	s.call("GET", "/api/data/notifications/count", alice, nil).want(t, 200).decode(t, &total)
	if total.TotalCount != 1 {
		t.Fatalf("count after delete: %d", total.TotalCount)
	}
	s.call("DELETE", "/api/data/notifications/delete/"+n2.ID, alice, nil).want(t, 404)

	s.send(svc, "alice", "dave", "task")
	var all struct{ Timestamp time.Time }
	s.call("POST", "/api/data/notifications/markallread", alice, nil).want(t, 200).decode(t, &all)
	if got := s.unread(alice); got != 0 {
		t.Fatalf("unread after markallread: %d", got)
	}
	p := s.page(alice, "?asFlatList=true")
	if p.TotalCount != 2 || p.UnreadCount != 0 || len(p.Items) != 2 {
		t.Fatalf("page after markallread: %+v", p)
	}
	for _, it := range p.Items {
		if it.ReadDate == nil {
			t.Fatalf("notification %s unread after markallread", it.ID)
		}
	}
	// Again, with nothing unread: the date they were read, not a new one.
	var allAgain struct{ Timestamp time.Time }
	s.call("POST", "/api/data/notifications/markallread", alice, nil).want(t, 200).decode(t, &allAgain)
	if !allAgain.Timestamp.Equal(all.Timestamp) {
		t.Fatalf("second markallread answered %v, want the first's %v", allAgain.Timestamp, all.Timestamp)
	}
	s.call("DELETE", "/api/data/notifications/deleteall", alice, nil).want(t, 200)
	if p := s.page(alice, ""); p.TotalCount != 0 || len(p.Items) != 0 {
		t.Fatalf("page after deleteall: %+v", p)
	}
}

func TestNotificationErrors(t *testing.T) {
	s := startService(t)
	alice := token(t, "alice", "w1")
	svc := sender(t, "w1")
	n := s.send(svc, "alice", "bob", "task")
	unknown := "0193a6a2-7c5e-7000-8000-000000000000"

	cases := []struct {
		name, method, path, tok string
		body                    any
		headers                 []string
		status                  int
		field                   string // expected validationErrors key
	}{
		{"no token", "GET", "/api/data/notifications/unreadcount", "", nil, nil, 401, ""},
		{"unknown route", "GET", "/api/data/nothing", alice, nil, nil, 404, ""},
		{"unknown sub-route", "GET", "/api/data/notifications/nothing", alice, nil, nil, 404, ""},
		{"wrong method", "PUT", "/api/data/notifications/unreadcount", alice, nil, nil, 405, ""},
		{"delete malformed id", "DELETE", "/api/data/notifications/delete/not-a-uuid", alice, nil, nil, 400, "id"},
		{"delete unknown id", "DELETE", "/api/data/notifications/delete/" + unknown, alice, nil, nil, 404, ""},
		{"markread unknown id", "POST", "/api/data/notifications/" + unknown + "/markread", alice, nil, nil, 404, ""},
		{"markunread malformed id", "POST", "/api/data/notifications/x/markunread", alice, nil, nil, 400, "id"},
		{"send without privilege", "POST", sendPath, alice, map[string]any{"recipientId": "alice", "senderId": "0000b0b0-0000-4000-8000-000000000001", "notificationType": "t"}, nil, 403, ""},
		{"send malformed json", "POST", sendPath, svc, `{"recipientId":`, nil, 400, ""},
		{"send not json", "POST", sendPath, svc, `{}`, []string{"Content-Type", "text/plain"}, 415, ""},
		{"send empty body", "POST", sendPath, svc, ` `, nil, 400, ""},
		{"send wrong type", "POST", sendPath, svc, map[string]any{"recipientId": 5}, nil, 400, "recipientId"},
		{"send missing fields", "POST", sendPath, svc, map[string]any{}, nil, 400, "recipientId"},
		{"send bad recipient", "POST", sendPath, svc, map[string]any{"recipientId": "a.b", "senderId": "0000b0b0-0000-4000-8000-000000000001", "notificationType": "t"}, nil, 400, "recipientId"},
		{"send data not object", "POST", sendPath, svc, map[string]any{"recipientId": "a", "senderId": "0000b0b0-0000-4000-8000-000000000001", "notificationType": "t", "data": []int{1}}, nil, 400, "data"},
		{"send too large", "POST", sendPath, svc, fmt.Sprintf(`{"message":%q}`, make([]byte, 300<<10)), nil, 413, ""},
		{"list bad lastId", "GET", "/api/data/notifications?lastId=zzz", alice, nil, nil, 400, "lastId"},
		{"list unknown lastId", "GET", "/api/data/notifications?lastId=" + unknown, alice, nil, nil, 400, "lastId"},
		{"list bad flat", "GET", "/api/data/notifications?asFlatList=maybe", alice, nil, nil, 400, "asFlatList"},
		{"list NUL sender", "GET", "/api/data/notifications?senderId=%00", alice, nil, nil, 400, "senderId"},
		// A sender that is no UUID is named by its name-based UUID
		// (TestSendNamesUpstreamIDsEndToEnd); these cannot be.
		{"send sender with spaces around", "POST", sendPath, svc, map[string]any{"recipientId": "a", "senderId": " bob", "notificationType": "t"}, nil, 400, "senderId"},
		{"send sender a uuid in braces", "POST", sendPath, svc, map[string]any{"recipientId": "a", "senderId": "{0000b0b0-0000-4000-8000-000000000001}", "notificationType": "t"}, nil, 400, "senderId"},
		{"send sender too long", "POST", sendPath, svc, map[string]any{"recipientId": "a", "senderId": strings.Repeat("b", 201), "notificationType": "t"}, nil, 400, "senderId"},
		{"send sender a control character", "POST", sendPath, svc, map[string]any{"recipientId": "a", "senderId": "b\tb", "notificationType": "t"}, nil, 400, "senderId"},
		{"send sender empty", "POST", sendPath, svc, map[string]any{"recipientId": "a", "senderId": "", "notificationType": "t"}, nil, 400, "senderId"},
		{"send sender a number", "POST", sendPath, svc, `{"recipientId":"a","senderId":7,"notificationType":"t"}`, nil, 400, "senderId"},
		{"list NUL type", "GET", "/api/data/notifications?notificationTypes=a%00", alice, nil, nil, 400, "notificationTypes"},
		{"send trailing brace", "POST", sendPath, svc, `{}}`, nil, 400, ""},
		{"send NUL subject", "POST", sendPath, svc, map[string]any{"recipientId": "a", "senderId": "0000b0b0-0000-4000-8000-000000000001", "notificationType": "t", "subject": "a\x00b"}, nil, 400, "subject"},
		{"send NUL in data", "POST", sendPath, svc, `{"recipientId":"a","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"t","data":{"taskName":"\u0000"}}`, nil, 400, "data"},
		// data's ids that are no UUID are named too (an integer, a string);
		// these cannot be.
		{"send data taskId a fraction", "POST", sendPath, svc, `{"recipientId":"a","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"t","data":{"taskId":4.2}}`, nil, 400, "data.taskId"},
		{"send data taskId a boolean", "POST", sendPath, svc, `{"recipientId":"a","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"t","data":{"taskId":true}}`, nil, 400, "data.taskId"},
		{"send data projectId an object", "POST", sendPath, svc, `{"recipientId":"a","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"t","data":{"projectId":{"id":"p-1"}}}`, nil, 400, "data.projectId"},
		{"send data assigneeId with a space around", "POST", sendPath, svc, `{"recipientId":"a","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"t","data":{"assigneeId":"p-1 "}}`, nil, 400, "data.assigneeId"},
		{"send data taskName a number", "POST", sendPath, svc, `{"recipientId":"a","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"t","data":{"taskName":7}}`, nil, 400, "data.taskName"},
		{"send data unknown field", "POST", sendPath, svc, `{"recipientId":"a","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"t","data":{"marker":"m"}}`, nil, 400, "data.marker"},
		{"markread ok with unknown query and header", "POST", "/api/data/notifications/" + n.ID + "/markread?foo=bar", alice, nil, []string{"X-Unknown", "1"}, 200, ""},
		{"trailing slash tolerated", "GET", "/api/data/notifications/unreadcount/", alice, nil, nil, 200, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := s.call(c.method, c.path, c.tok, c.body, c.headers...).want(t, c.status)
			if c.field != "" && len(env.Error.ValidationErrors[c.field]) == 0 {
				t.Fatalf("no validationErrors.%s: %s", c.field, env.raw)
			}
			if c.status == 401 && env.Header.Get("WWW-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate")
			}
		})
	}
}

func TestAuthFailures(t *testing.T) {
	s := startService(t)
	past := func() string {
		tok, _ := signWith(testSecret, "alice", "w1", time.Now().Add(-2*time.Hour), time.Hour)
		return tok
	}()
	future := func() string {
		tok, _ := signWith(testSecret, "alice", "w1", time.Now().Add(time.Hour), time.Hour)
		return tok
	}()
	wrongKey, _ := signWith("another-secret-another-secret-another-secret", "alice", "w1", time.Now(), time.Hour)
	// {"alg":"none","typ":"JWT"} . {"sub":"alice","workspace_id":"w1","exp":9999999999} .
	none := "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJhbGljZSIsIndvcmtzcGFjZV9pZCI6IncxIiwiZXhwIjo5OTk5OTk5OTk5fQ."
	for name, auth := range map[string]string{
		"missing":        "",
		"not bearer":     "Basic YWxpY2U6cHc=",
		"malformed":      "Bearer abc.def",
		"wrong key":      "Bearer " + wrongKey,
		"alg none":       "Bearer " + none,
		"expired":        "Bearer " + past,
		"not yet valid":  "Bearer " + future,
		"bearer nothing": "Bearer ",
	} {
		t.Run(name, func(t *testing.T) {
			env := s.call("GET", "/api/data/notifications/unreadcount", "", nil, "Authorization", auth).want(t, 401)
			if env.Header.Get("WWW-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate")
			}
		})
	}
}

func TestIsolation(t *testing.T) {
	s := startService(t)
	alice := token(t, "alice", "w1")
	bob := token(t, "bob", "w1")
	aliceW2 := token(t, "alice", "w2")
	n := s.send(sender(t, "w1"), "alice", "carol", "task")

	// Bob and Alice-in-another-workspace see nothing and touch nothing;
	// Alice's id answers them exactly as an unknown id does.
	for name, tok := range map[string]string{"other user": bob, "other workspace": aliceW2} {
		t.Run(name, func(t *testing.T) {
			if got := s.unread(tok); got != 0 {
				t.Fatalf("unread %d", got)
			}
			if p := s.page(tok, ""); len(p.Items) != 0 || p.TotalCount != 0 {
				t.Fatalf("page %+v", p)
			}
			const unknownID = "0193a6a2-7c5e-7000-8000-000000000000"
			for _, c := range []struct{ method, path string }{
				{"DELETE", "/api/data/notifications/delete/%s"},
				{"POST", "/api/data/notifications/%s/markread"},
				{"POST", "/api/data/notifications/%s/markunread"},
			} {
				foreign := s.call(c.method, fmt.Sprintf(c.path, n.ID), tok, nil).want(t, 404)
				unknown := s.call(c.method, fmt.Sprintf(c.path, unknownID), tok, nil).want(t, 404)
				if foreign.Error.Message != unknown.Error.Message {
					t.Fatalf("foreign and unknown ids answer differently: %q vs %q", foreign.Error.Message, unknown.Error.Message)
				}
			}
			s.call("DELETE", "/api/data/notifications/deleteall", tok, nil).want(t, 200)
			s.call("POST", "/api/data/notifications/markallread", tok, nil).want(t, 200)
		})
	}
	if got := s.unread(alice); got != 1 {
		t.Fatalf("alice's unread after others acted: %d", got)
	}
}

func TestConcurrentDeletes(t *testing.T) {
	s := startService(t)
	alice := token(t, "alice", "w1")
	n := s.send(sender(t, "w1"), "alice", "bob", "task")

	const workers = 50
	statuses := make(chan int, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("DELETE", s.base+"/api/data/notifications/delete/"+n.ID, nil)
			req.Header.Set("Authorization", "Bearer "+alice)
			resp, err := s.client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	wg.Wait()
	close(statuses)
	counts := map[int]int{}
	for st := range statuses {
		counts[st]++
	}
	if counts[200] != 1 || counts[404] != workers-1 {
		t.Fatalf("statuses %v, want one 200 and %d 404", counts, workers-1)
	}
	deleted := s.logEvents(t, "NotificationDeleted")
	if len(deleted) != 1 {
		t.Fatalf("%d NotificationDeleted events in the log, want 1", len(deleted))
	}
}
