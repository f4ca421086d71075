// Command example-consumer is a downstream consumer of Astro's events, as
// short as one can be: a durable JetStream consumer that starts at a given
// time, prints every event (CloudEvents headers + JSON data), and keeps
// going. Stop it and start it again: it resumes where it left off, because
// the consumer is durable and each event is acknowledged after its effect.
//
// Astro keeps its events in two streams: ASTRO_HISTORY (holiday, resource
// and workspace events, kept for good) and ASTRO_INBOXES (notification
// events, whose older events give way to an InboxCompacted event restating
// the inbox, and which are erased on request). A consumer reads one stream,
// so -subject names a kind, and the stream follows from it. -subject may be
// repeated, with kinds of one stream: a consumer of holidays takes
// astro.events.*.workspace.* too, where it learns that a workspace's
// holidays were erased.
//
// NATS takes no anonymous clients: connect as the consumer, with the URL
// `astro nats-credentials --role consumer --url` prints (it holds the user
// and password), or with -user and -password. The consumer receives replies
// under its own inbox prefix, "_INBOX_consumer", which its permissions
// allow, and nothing else of the account's.
//
//	go run ./cmd/example-consumer -nats "$(go run ./cmd/astro nats-credentials --role consumer --url)" -since 2026-01-01T00:00:00Z \
//		-subject 'astro.events.*.holiday.*' -subject 'astro.events.*.workspace.*'
//
// For exactly-once effects, store the event's stream sequence in the same
// transaction as the effect: JetStream redelivers an event whose
// acknowledgement was lost. Skipping events at or below the stored one is
// right only when they are applied strictly in order (MaxAckPending 1, or
// stopping at the first that fails): otherwise a failed event redelivered
// after a later one was stored is skipped for good (see README, "Consuming
// events").
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	url := flag.String("nats", os.Getenv("NATS_URL"), "NATS server URL, with user:password@ or with -user and -password ($NATS_URL)")
	user := flag.String("user", os.Getenv("NATS_USER"), "NATS user ($NATS_USER)")
	password := flag.String("password", os.Getenv("NATS_PASSWORD"), "NATS password ($NATS_PASSWORD)")
	inbox := flag.String("inbox-prefix", "_INBOX_consumer", "where replies come: the prefix the user's permissions allow")
	since := flag.String("since", "", "first run only: start at this RFC 3339 time (default: from the beginning)")
	name := flag.String("name", "example-consumer", "durable consumer name: one per downstream service")
	var filters subjects
	flag.Var(&filters, "subject", "subjects to consume: astro.events.<workspace>.<kind>.<id>, e.g. astro.events.*.holiday.*; repeat it for several kinds of one stream (default astro.events.*.inbox.*)")
	flag.Parse()
	if len(filters) == 0 {
		filters = subjects{"astro.events.*.inbox.*"}
	}
	if *url == "" {
		fmt.Fprintln(os.Stderr, "example-consumer: -nats is required: the URL from `astro nats-credentials --role consumer --url`")
		os.Exit(2)
	}
	opts := []nats.Option{nats.CustomInboxPrefix(*inbox)}
	if *user != "" {
		opts = append(opts, nats.UserInfo(*user, *password))
	}
	if err := run(*url, opts, *since, *name, filters); err != nil {
		fmt.Fprintln(os.Stderr, "example-consumer:", err)
		os.Exit(1)
	}
}

// subjects is -subject, repeated.
type subjects []string

func (s *subjects) String() string { return strings.Join(*s, " ") }

func (s *subjects) Set(v string) error {
	*s = append(*s, v)
	return nil
}

// streamFor names the stream that keeps the events on filters, by their
// kind: notification (inbox) events in ASTRO_INBOXES, the rest in
// ASTRO_HISTORY. Filters of both are refused: a consumer reads one stream.
func streamFor(filters []string) (string, error) {
	stream := ""
	for _, filter := range filters {
		st := ""
		tokens := strings.Split(filter, ".")
		if len(tokens) >= 4 && tokens[0] == "astro" && tokens[1] == "events" {
			switch tokens[3] {
			case "inbox":
				st = "ASTRO_INBOXES"
			case "holiday", "resource", "workspace":
				st = "ASTRO_HISTORY"
			}
		}
		if st == "" {
			return "", fmt.Errorf("-subject %q: want astro.events.<workspace>.<kind>.<id> with kind inbox, holiday, resource or workspace", filter)
		}
		if stream != "" && st != stream {
			return "", fmt.Errorf("-subject %s: kinds of two streams, %s and %s; one consumer reads one stream", strings.Join(filters, " "), stream, st)
		}
		stream = st
	}
	return stream, nil
}

func run(url string, opts []nats.Option, since, name string, filters []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return err
	}
	defer nc.Drain()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := consumer(ctx, js, name, filters, since)
	if err != nil {
		return err
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
	select {
	case <-ctx.Done():
		// Let the handler under way finish and acknowledge: an effect done
		// and not acknowledged is delivered again at the next start.
		cc.Drain()
		<-cc.Closed()
		return nil
	case <-cc.Closed():
		// The durable consumer was deleted (or the connection closed): say
		// so, rather than wait for deliveries that no longer come.
		return fmt.Errorf("consumer %s closed; start again to create it from -since", name)
	}
}

// consumer binds to the durable consumer name of filters' stream, and
// creates it, from since or the beginning, when it does not exist.
func consumer(ctx context.Context, js jetstream.JetStream, name string, filters []string, since string) (jetstream.Consumer, error) {
	stream, err := streamFor(filters)
	if err != nil {
		return nil, err
	}
	cfg := jetstream.ConsumerConfig{
		Durable:        name,
		FilterSubjects: filters,
		AckPolicy:      jetstream.AckExplicitPolicy,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	}
	if since != "" {
		t, err := time.Parse(time.RFC3339, since)
		if err != nil {
			return nil, fmt.Errorf("-since: %w", err)
		}
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &t
	}
	// The start position applies when the consumer is created; afterwards
	// the server remembers where it is. An existing one with other
	// filters is refused rather than changed: it would resume at its old
	// position and skip what the new subjects held before it.
	cons, err := js.Consumer(ctx, stream, name)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		return js.CreateConsumer(ctx, stream, cfg)
	case err != nil:
		return nil, err
	}
	got := cons.CachedInfo().Config
	if have := append([]string{got.FilterSubject}, got.FilterSubjects...); !sameSubjects(have, filters) {
		return nil, fmt.Errorf("consumer %s already consumes %s, not %s: choose another -name, or delete it",
			name, strings.TrimSpace(strings.Join(have, " ")), strings.Join(filters, " "))
	}
	fmt.Fprintf(os.Stderr, "consumer %s resumes where it stopped\n", name)
	return cons, nil
}

// sameSubjects reports whether a and b hold the same subjects, in any
// order; empty ones do not count.
func sameSubjects(a, b []string) bool {
	set := func(subjects []string) map[string]bool {
		m := map[string]bool{}
		for _, s := range subjects {
			if s != "" {
				m[s] = true
			}
		}
		return m
	}
	return maps.Equal(set(a), set(b))
}
