package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"astro/events/natslog"
	"astro/events/natstest"
)

// A consumer of holidays must see WorkspaceErased too, on another kind's
// subjects of the same stream: -subject repeated makes one consumer of
// both, and binding to it again takes the same subjects in any order.
func TestConsumerOfSeveralSubjects(t *testing.T) {
	nc := natstest.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := natslog.Open(ctx, nc, natslog.Config{}); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, subject := range []string{"astro.events.w1.holiday.h1", "astro.events.w1.resource.r1", "astro.events.w1.workspace.w1"} {
		m := nats.NewMsg(subject)
		m.Header.Set("ce-type", subject)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	holidays := []string{"astro.events.*.holiday.*", "astro.events.*.workspace.*"}
	cons, err := consumer(ctx, js, "billing", holidays, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	batch, err := cons.Fetch(10, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		got = append(got, m.Subject())
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	if want := "astro.events.w1.holiday.h1 astro.events.w1.workspace.w1"; strings.Join(got, " ") != want {
		t.Errorf("consumed %v, want %s", got, want)
	}

	for _, tc := range []struct {
		name    string
		filters []string
		err     string
	}{
		{"the same subjects, in another order", []string{holidays[1], holidays[0]}, ""},
		{"fewer subjects", holidays[:1], "already consumes"},
		{"kinds of both streams", []string{holidays[0], "astro.events.*.inbox.*"}, "one consumer reads one stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := consumer(ctx, js, "billing", tc.filters, "")
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("consumer %v: %v, want %q", tc.filters, err, tc.err)
			}
		})
	}
}
