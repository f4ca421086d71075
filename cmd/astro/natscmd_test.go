package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"astro/api/auth"
	"astro/api/idempotency"
	"astro/api/natscmd"
)

func TestSendOverNATS(t *testing.T) {
	s := startService(t)
	nc := s.connectNATS()
	svc := token(t, "svc", "w1", "notifications:send")
	request := func(tok, body string) envelope {
		t.Helper()
		msg := nats.NewMsg(natscmd.SendSubject)
		msg.Data = []byte(body)
		msg.Header.Set("x-integration-name", "task-service")
		if tok != "" {
			msg.Header.Set("Authorization", "Bearer "+tok)
		}
		return natsRequest(t, nc, msg)
	}
	env := request(svc, `{"recipientId":"alice","senderId":"00005fc0-0000-4000-8000-000000000002","notificationType":"task","subject":"s","message":"m"}`)
	if !env.Success || env.StatusCode != "OK" {
		t.Fatalf("send over NATS: %+v", env)
	}
	var n notificationDto
	env.decode(t, &n)
	if n.ID == "" || n.SenderID != "00005fc0-0000-4000-8000-000000000002" {
		t.Fatalf("reply data: %+v", n)
	}
	// Read-your-writes across transports: poll, bounded, since the NATS
	// path does not wait for the read model.
	alice := token(t, "alice", "w1")
	waitFor(t, 10*time.Second, func() error {
		if n := s.unread(alice); n != 1 {
			return fmt.Errorf("notification sent over NATS never showed: %d unread", n)
		}
		return nil
	})
	sent := s.logEvents(t, "NotificationSent")
	if len(sent) != 1 || sent[0].Integration != "task-service" || sent[0].WorkspaceID != "w1" {
		t.Fatalf("event: %+v", sent)
	}

	for body, field := range map[string]string{
		`not json`: "",
		`[]`:       "",
		`{"recipientId":"alice","senderId":"00005fc0-0000-4000-8000-000000000002","notificationType":"t","subject":"a\u0000b"}`: "subject",
		`{"workspaceId":"w1","recipientId":"a.b","senderId":"00005fc0-0000-4000-8000-000000000002","notificationType":"t"}`:     "recipientId",
		// NotificationDataDto, as over HTTP: the one rule is the command's,
		// after the one decoder named what it could.
		`{"recipientId":"alice","senderId":"00005fc0-0000-4000-8000-000000000002","notificationType":"t","data":{"taskId":4.2}}`:        "data.taskId",
		`{"recipientId":"alice","senderId":"00005fc0-0000-4000-8000-000000000002","notificationType":"t","data":{"assigneeId":" bob"}}`: "data.assigneeId",
		`{"recipientId":"alice","senderId":"00005fc0-0000-4000-8000-000000000002","notificationType":"t","data":{"marker":"m"}}`:        "data.marker",
		`{"recipientId":"alice","senderId":"bob ","notificationType":"t"}`:                                                              "senderId",
	} {
		env := request(svc, body)
		if env.Success || !env.HasError || env.StatusCode != "BadRequest" || env.Error == nil {
			t.Fatalf("%s: %+v", body, env)
		}
		if field != "" && len(env.Error.ValidationErrors[field]) == 0 {
			t.Fatalf("%s: no validationErrors.%s", body, field)
		}
	}
	// A body past HTTP's bound is refused as over HTTP, not taken up to
	// NATS's own (1 MiB).
	big := `{"recipientId":"alice","senderId":"00005fc0-0000-4000-8000-000000000002","notificationType":"t","subject":"` + strings.Repeat("s", 300<<10) + `"}`
	if env := request(svc, big); env.StatusCode != "RequestEntityTooLarge" {
		t.Fatalf("a 300 KiB send over NATS: %+v", env)
	}
	// The shared load generator's body: its ids named as over HTTP.
	env = request(svc, `{"recipientId":"alice","senderId":"bob","notificationType":"task.assigned","subject":"New task","message":"Bob assigned you task 7","data":{"taskId":7}}`)
	if env.StatusCode != "OK" {
		t.Fatalf("the load generator's send over NATS: %+v", env)
	}
	env.decode(t, &n)
	if n.SenderID != uuidOfBob || n.Data["taskId"] != uuidOf7 {
		t.Fatalf("the load generator's send over NATS answered %+v, want sender %s, taskId %s", n, uuidOfBob, uuidOf7)
	}
}

// TestNATSCommandAuthorization holds commands over NATS to the rules of
// HTTP: the token decides who sends and into which workspace.
func TestNATSCommandAuthorization(t *testing.T) {
	s := startService(t)
	nc := s.connectNATS()
	const body = `{"recipientId":"victim","senderId":"00005fc0-0000-4000-8000-000000000002","notificationType":"task","subject":"s","message":"m"}`
	cases := []struct {
		name, authorization, body, status string
	}{
		{"no token", "", body, "Unauthorized"},
		{"not a bearer token", "Basic c3ZjOnB3", body, "Unauthorized"},
		{"bad signature", "Bearer " + token(t, "svc", "victimws", "notifications:send") + "x", body, "Unauthorized"},
		{"expired", "Bearer " + expiredToken(t), body, "Unauthorized"},
		{"no privilege", "Bearer " + token(t, "svc", "victimws"), body, "Forbidden"},
		{"other workspace named", "Bearer " + token(t, "svc", "attacker", "notifications:send"),
			`{"workspaceId":"victimws","recipientId":"victim","senderId":"00005fc0-0000-4000-8000-000000000002","notificationType":"task","subject":"s","message":"m"}`, "Forbidden"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			msg := nats.NewMsg(natscmd.SendSubject)
			msg.Data = []byte(c.body)
			if c.authorization != "" {
				msg.Header.Set("Authorization", c.authorization)
			}
			env := natsRequest(t, nc, msg)
			if env.Success || !env.HasError || env.StatusCode != c.status || env.Error == nil || env.Error.Message == "" {
				t.Fatalf("want %s: %+v", c.status, env)
			}
		})
	}
	if got := s.unread(token(t, "victim", "victimws")); got != 0 {
		t.Fatalf("a refused command reached the inbox: %d unread", got)
	}
	if sent := s.logEvents(t, "NotificationSent"); len(sent) != 0 {
		t.Fatalf("refused commands appended %d events", len(sent))
	}

	// The token's workspace is where it lands, and naming it is allowed.
	// NATS keeps a header's case as written; either is read.
	for i, body := range []string{body, `{"workspaceId":"attacker",` + body[1:]} {
		msg := nats.NewMsg(natscmd.SendSubject)
		msg.Data = []byte(body)
		msg.Header[[]string{"Authorization", "authorization"}[i]] = []string{"Bearer " + token(t, "svc", "attacker", "notifications:send")}
		if env := natsRequest(t, nc, msg); !env.Success {
			t.Fatalf("%s: %+v", body, env)
		}
	}
	for _, e := range s.logEvents(t, "NotificationSent") {
		if e.WorkspaceID != "attacker" {
			t.Fatalf("sent into %s", e.WorkspaceID)
		}
	}
}

// TestSendWorkspaceIDOnBothTransports: a send body naming a workspace
// other than the token's is refused with 403 over HTTP as over NATS, and
// nothing is delivered; naming the token's own, or none, sends into it.
func TestSendWorkspaceIDOnBothTransports(t *testing.T) {
	s := startService(t)
	nc := s.connectNATS()
	svc := token(t, "svc", "attacker", "notifications:send")
	transports := map[string]func(body string) envelope{
		"HTTP": func(body string) envelope { return s.call("POST", sendPath, svc, body) },
		"NATS": func(body string) envelope {
			msg := nats.NewMsg(natscmd.SendSubject)
			msg.Data = []byte(body)
			msg.Header.Set("Authorization", "Bearer "+svc)
			return natsRequest(t, nc, msg)
		},
	}
	const rest = `"recipientId":"victim","senderId":"00005fc0-0000-4000-8000-000000000002","notificationType":"task","subject":"s","message":"m"}`
	for name, send := range transports {
		for _, tc := range []struct {
			body   string
			status string
		}{
			{`{"workspaceId":"victimws",` + rest, "Forbidden"},
			{`{"workspaceId":"attacker",` + rest, "OK"},
			{`{` + rest, "OK"},
		} {
			if env := send(tc.body); env.StatusCode != tc.status {
				t.Errorf("%s %s: %s %s, want %s", name, tc.body, env.StatusCode, env.raw, tc.status)
			}
		}
	}
	if got := s.unread(token(t, "victim", "victimws")); got != 0 {
		t.Fatalf("a send naming another workspace reached it: %d unread", got)
	}
	sent := s.logEvents(t, "NotificationSent")
	for _, e := range sent {
		if e.WorkspaceID != "attacker" {
			t.Fatalf("sent into %s", e.WorkspaceID)
		}
	}
	if len(sent) != 4 {
		t.Fatalf("%d sends, want the 4 accepted", len(sent))
	}
}

// natsRequest sends msg and decodes the reply's envelope.
// heldSend is a NATS send of svc in w1 under an Idempotency-Key that
// another request holds, as the instance running it would: the service
// waits for the key, up to the send's 10 s, or until release.
type heldSend struct {
	nc      *nats.Conn
	body    []byte
	svc     string
	claim   *idempotency.Claim
	replies *nats.Subscription // the held send's answer
}

func holdSend(t *testing.T, s *service) heldSend {
	t.Helper()
	h := heldSend{nc: s.connectNATS(), svc: token(t, "svc", "w1", "notifications:send"),
		body: []byte(`{"recipientId":"alice","senderId":"00005fc0-0000-4000-8000-000000000002","notificationType":"task","subject":"s","message":"m"}`)}
	js, err := jetstream.New(h.nc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := idempotency.Open(t.Context(), js, idempotency.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h.claim, _, err = store.Begin(t.Context(), idempotency.Key("w1", "svc", "held"),
		idempotency.RequestHash("NATS", natscmd.SendSubject, h.body, "notifications:send"))
	if err != nil || h.claim == nil {
		t.Fatalf("claim the key: %v, %v", h.claim, err)
	}
	if h.replies, err = h.nc.SubscribeSync(nats.NewInbox()); err != nil {
		t.Fatal(err)
	}
	held := h.send("held")
	held.Reply = h.replies.Subject
	if err := h.nc.PublishMsg(held); err != nil {
		t.Fatal(err)
	}
	return h
}

// send is a send of the same body, under key unless it is "".
func (h heldSend) send(key string) *nats.Msg {
	msg := nats.NewMsg(natscmd.SendSubject)
	msg.Data = h.body
	msg.Header.Set("Authorization", "Bearer "+h.svc)
	if key != "" {
		msg.Header.Set("Idempotency-Key", key)
	}
	return msg
}

// release gives the key up and returns the held send's answer.
func (h heldSend) release(t *testing.T) envelope {
	t.Helper()
	if err := h.claim.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	resp, err := h.replies.NextMsg(15 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	env := envelope{raw: resp.Data}
	if err := json.Unmarshal(resp.Data, &env); err != nil {
		t.Fatalf("reply is not an envelope: %s", resp.Data)
	}
	return env
}

// A NATS send that waits (here for an Idempotency-Key another request
// holds) does not hold up the sends behind it.
func TestNATSSendsDoNotWaitForEachOther(t *testing.T) {
	s := startService(t)
	h := holdSend(t, s)
	// One connection keeps the order: this one comes after the held one.
	if env := natsRequest(t, h.nc, h.send("")); !env.Success {
		t.Fatalf("the send behind the waiting one: %+v", env)
	}
	if n, _, _ := h.replies.Pending(); n != 0 {
		t.Fatal("the held send was answered before the one behind it: the instance answered them one at a time")
	}
	if env := h.release(t); !env.Success {
		t.Fatalf("the held send, once the key was free: %s", env.raw)
	}
}

// A NATS send under way when the service is stopped runs to its end and
// is answered: cut short, its event could be in the log while its sender
// got an error, and a retry without a key would send it twice.
func TestNATSSendUnderWayAtShutdownIsAnswered(t *testing.T) {
	s := startService(t)
	h := holdSend(t, s)
	natsRequest(t, h.nc, h.send("")) // answered: the held one, before it, is under way

	stopped := s.beginStop()
	if env := h.release(t); !env.Success {
		t.Fatalf("the send under way at shutdown: %s", env.raw)
	}
	<-stopped
}

func natsRequest(t *testing.T, nc *nats.Conn, msg *nats.Msg) envelope {
	t.Helper()
	resp, err := nc.RequestMsg(msg, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var env envelope
	if err := json.Unmarshal(resp.Data, &env); err != nil {
		t.Fatalf("reply is not an envelope: %s", resp.Data)
	}
	return env
}

func expiredToken(t *testing.T) string {
	t.Helper()
	tok, err := auth.Sign([]byte(testSecret), auth.Claims{UserID: "svc", WorkspaceID: "victimws", Scopes: []string{"notifications:send"}}, time.Now().Add(-2*time.Hour), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
