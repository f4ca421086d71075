package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func TestConnHasJetStream(t *testing.T) {
	js, err := jetstream.New(Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(t.Context(), "t.1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	msg, err := stream.GetMsg(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if string(msg.Data) != "x" {
		t.Errorf("got %q, want x", msg.Data)
	}
}

func TestServersAreIndependent(t *testing.T) {
	a, b := Conn(t), Conn(t)
	sub, err := b.SubscribeSync("greeting")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Publish("greeting", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	if msg, err := sub.NextMsg(100 * time.Millisecond); err == nil {
		t.Errorf("message %q crossed from one test server to another", msg.Data)
	}
}
