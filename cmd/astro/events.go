package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"astro/events"
	"astro/events/natslog"
	"astro/events/natsserver"
	"astro/projections"
)

// eventsUsage is the usage of `astro events`, one line per subcommand.
const eventsUsage = `Usage: astro events tail [--type T,…] [--since TIME | --from-seq N] [--subject FILTER] [--follow] [--nats-url URL]
       astro events parked [--projector P] [--nats-url URL]
       astro events redrive [--projector P] [--nats-url URL]`

// runEvents is `astro events tail|parked|redrive`: the log as a consumer
// and an operator see it. Each subcommand has its own flags.
func runEvents(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, eventsUsage)
		return errors.New("events: want tail, parked or redrive")
	}
	sub := map[string]func(context.Context, []string, func(string) string, io.Writer, io.Writer) error{
		"tail": runEventsTail, "parked": runEventsParked, "redrive": runEventsRedrive,
	}[args[0]]
	if sub == nil {
		fmt.Fprintln(stderr, eventsUsage)
		return fmt.Errorf("events: unknown command %q", args[0])
	}
	return sub(ctx, args[1:], getenv, stdout, stderr)
}

// runEventsTail prints the log's events as JSON lines. It reads what a
// downstream consumer may read, with a consumer's credentials.
func runEventsTail(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("astro events tail", flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := natsClient{Role: natsserver.UserConsumer}
	client.addFlags(fs, getenv)
	types := fs.String("type", "", "only these event types, comma-separated")
	since := fs.String("since", "", "from this RFC 3339 time")
	fromSeq := fs.Uint64("from-seq", 0, "from this stream sequence; needs a --subject of one aggregate kind, as each stream has sequences of its own")
	follow := fs.Bool("follow", false, "keep printing new events until interrupted")
	filter := fs.String("subject", events.SubjectPrefix+".>", "subject filter, e.g. astro.events.acme.holiday.*")
	if err := fs.Parse(args); err != nil {
		return err
	}
	client.ServiceOnly = *follow
	from := events.ScanFrom{Seq: *fromSeq}
	if *since != "" && *fromSeq > 0 {
		fmt.Fprintln(stderr, eventsUsage)
		return errors.New("events tail: --since and --from-seq both place the start: give one of them")
	}
	if *since != "" {
		var err error
		if from.Time, err = time.Parse(time.RFC3339Nano, *since); err != nil {
			return fmt.Errorf("--since: want an RFC 3339 time: %w", err)
		}
	}
	log, _, closeLog, err := openLog(ctx, client)
	if err != nil {
		return err
	}
	defer closeLog()
	out := json.NewEncoder(stdout)
	want := strings.FieldsFunc(*types, func(r rune) bool { return r == ',' })
	print := func(m natslog.Message) error {
		if len(want) > 0 && !slices.Contains(want, m.Header.Get("ce-type")) {
			return nil
		}
		return out.Encode(tailLine(m))
	}
	err = log.Tail(ctx, *filter, from, *follow, print)
	if *follow && errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// runEventsParked lists the events projectors could not apply, with the
// reason.
func runEventsParked(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	log, _, projector, closeLog, err := openParked(ctx, "parked", args, getenv, stderr)
	if err != nil {
		return err
	}
	defer closeLog()
	out := json.NewEncoder(stdout)
	return log.ListParked(ctx, projector, func(p natslog.Parked) error {
		return out.Encode(map[string]any{"projector": p.Projector, "seq": p.Seq, "subject": p.Subject,
			"type": p.Header.Get("ce-type"), "reason": p.Reason, "parkedAt": p.ParkedAt, "parkSeq": p.ParkSeq})
	})
}

// runEventsRedrive asks the running service to apply parked events again,
// after a fix.
func runEventsRedrive(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	_, nc, projector, closeLog, err := openParked(ctx, "redrive", args, getenv, stderr)
	if err != nil {
		return err
	}
	defer closeLog()
	names := projections.Names()
	if projector != "" {
		names = []string{projector}
	}
	for _, name := range names {
		resp, err := nc.Request(projections.RedriveSubject(name), nil, time.Minute)
		if errors.Is(err, nats.ErrNoResponders) {
			return fmt.Errorf("redrive %s: no running astro applies this projector; start the service and retry", name)
		}
		if err != nil {
			return fmt.Errorf("redrive %s: %w", name, err)
		}
		fmt.Fprintln(stdout, string(resp.Data))
	}
	return nil
}

// openParked parses the flags parked and redrive share (the connection
// and --projector) and opens the log as Astro: parked events and redrives
// are Astro's own business.
func openParked(ctx context.Context, sub string, args []string, getenv func(string) string, stderr io.Writer) (*natslog.Log, *nats.Conn, string, func(), error) {
	fs := flag.NewFlagSet("astro events "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := natsClient{Role: natsserver.UserAstro}
	client.addFlags(fs, getenv)
	projector := fs.String("projector", "", "only this projector")
	if err := fs.Parse(args); err != nil {
		return nil, nil, "", nil, err
	}
	if *projector != "" && !slices.Contains(projections.Names(), *projector) {
		return nil, nil, "", nil, fmt.Errorf("events %s: no projector %q; want one of %s", sub, *projector, strings.Join(projections.Names(), ", "))
	}
	log, nc, closeLog, err := openLog(ctx, client)
	return log, nc, *projector, closeLog, err
}

// tailLine is an event as a consumer sees it: envelope and data, and the
// stream whose sequence seq is (both streams count from 1). A message
// that is no event is shown as recorded, with why, since it is what
// someone tailing the log is likely looking for.
func tailLine(m natslog.Message) map[string]any {
	if m.Err != nil {
		return map[string]any{
			"stream": m.Stream, "seq": m.Seq, "subject": m.Subject, "headers": m.Header,
			"data": string(m.Data), "error": m.Err.Error(),
		}
	}
	e := m.Event
	return map[string]any{
		"stream": m.Stream, "seq": e.Seq, "subject": events.Subject(e.WorkspaceID, e.Aggregate), "id": e.ID, "type": e.Type,
		"version": e.Version, "time": e.Time, "workspaceId": e.WorkspaceID,
		"aggregate": map[string]string{"kind": e.Aggregate.Kind, "id": e.Aggregate.ID},
		"actorId":   e.ActorID, "integrationName": e.Integration, "correlationId": e.CorrelationID,
		"data": json.RawMessage(e.Data),
	}
}
