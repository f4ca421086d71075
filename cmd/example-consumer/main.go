// Command example-consumer is a downstream consumer of Astro's events, as
// short as one can be: a durable JetStream consumer that starts at a given
// time, prints every event (CloudEvents headers + JSON data), and keeps
// going. Stop it and start it again: it resumes where it left off, because
// the consumer is durable and each event is acknowledged after its effect.
//
//	go run ./cmd/example-consumer -since 2027-01-01T00:00:00Z
//
// For exactly-once effects, store the event's stream sequence in the same
// transaction as the effect, and skip events at or below the stored one:
// JetStream redelivers an event whose acknowledgement was lost.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	url := flag.String("nats", "nats://127.0.0.1:4222", "NATS server (the embedded one listens here by default)")
	since := flag.String("since", "", "first run only: start at this RFC 3339 time (default: from the beginning)")
	name := flag.String("name", "example-consumer", "durable consumer name: one per downstream service")
	filter := flag.String("subject", "astro.events.>", "subjects to consume, e.g. astro.events.*.holiday.*")
	flag.Parse()
	if err := run(*url, *since, *name, *filter); err != nil {
		fmt.Fprintln(os.Stderr, "example-consumer:", err)
		os.Exit(1)
	}
}

func run(url, since, name, filter string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Drain()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       name,
		FilterSubject: filter,
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	if since != "" {
		t, err := time.Parse(time.RFC3339, since)
		if err != nil {
			return fmt.Errorf("-since: %w", err)
		}
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &t
	}
	// The start position applies when the consumer is created; afterwards
	// the server remembers where it is.
	cons, err := js.CreateOrUpdateConsumer(ctx, "ASTRO_EVENTS", cfg)
	if err != nil {
		cons, err = js.Consumer(ctx, "ASTRO_EVENTS", name)
		if err != nil {
			return err
		}
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		meta, _ := m.Metadata()
		h := m.Headers()
		fmt.Printf("%d %s %s %s %s\n", meta.Sequence.Stream, h.Get("ce-time"), h.Get("ce-type"), h.Get("ce-subject"), m.Data())
		// The effect goes here; acknowledge only once it is done.
		_ = m.Ack()
	})
	if err != nil {
		return err
	}
	defer cc.Stop()
	<-ctx.Done()
	return nil
}
