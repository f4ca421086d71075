package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"astro/api/natscmd"
)

func TestSendOverNATS(t *testing.T) {
	s := startService(t)
	nc, err := nats.Connect(s.env["ASTRO_NATS_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	request := func(body string) envelope {
		t.Helper()
		msg := nats.NewMsg(natscmd.SendSubject)
		msg.Data = []byte(body)
		msg.Header.Set("x-integration-name", "task-service")
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
	env := request(`{"workspaceId":"w1","recipientId":"alice","senderId":"svc","notificationType":"task","subject":"s","message":"m"}`)
	if !env.Success || env.StatusCode != "OK" {
		t.Fatalf("send over NATS: %+v", env)
	}
	var n notificationDto
	env.decode(t, &n)
	if n.ID == "" || n.SenderID != "svc" {
		t.Fatalf("reply data: %+v", n)
	}
	// Read-your-writes across transports: poll, bounded, since the NATS
	// path does not wait for the read model.
	alice := token(t, "alice", "w1")
	deadline := time.Now().Add(10 * time.Second)
	for s.unread(alice) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("notification sent over NATS never showed")
		}
		time.Sleep(10 * time.Millisecond) // polling a read model, bounded by the deadline
	}
	sent := s.logEvents(t, "NotificationSent")
	if len(sent) != 1 || sent[0].Integration != "task-service" || sent[0].WorkspaceID != "w1" {
		t.Fatalf("event: %+v", sent)
	}

	for body, field := range map[string]string{
		`not json`: "",
		`{"recipientId":"alice","senderId":"svc","notificationType":"t"}`:                  "workspaceId",
		`{"workspaceId":"w1","recipientId":"a.b","senderId":"svc","notificationType":"t"}`: "recipientId",
	} {
		env := request(body)
		if env.Success || !env.HasError || env.StatusCode != "BadRequest" || env.Error == nil {
			t.Fatalf("%s: %+v", body, env)
		}
		if field != "" && len(env.Error.ValidationErrors[field]) == 0 {
			t.Fatalf("%s: no validationErrors.%s", body, field)
		}
	}
}
