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

// runEvents is `astro events tail|parked|redrive`: the log as a consumer
// and an operator see it.
func runEvents(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	usage := "Usage: astro events tail [--type T] [--since TIME | --from-seq N] [--follow] [--nats-url URL]\n       astro events parked [--projector P]\n       astro events redrive [--projector P]"
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return errors.New("events: want tail, parked or redrive")
	}
	fs := flag.NewFlagSet("astro events "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	// A tail reads what a consumer may; parked events and redrives are
	// Astro's own business.
	client := natsClient{Role: natsserver.UserConsumer}
	if args[0] != "tail" {
		client.Role = natsserver.UserAstro
	}
	client.addFlags(fs, getenv)
	types := fs.String("type", "", "tail: only these event types, comma-separated")
	since := fs.String("since", "", "tail: from this RFC 3339 time")
	fromSeq := fs.Uint64("from-seq", 0, "tail: from this stream sequence")
	follow := fs.Bool("follow", false, "tail: keep printing new events until interrupted")
	filter := fs.String("subject", events.SubjectPrefix+".>", "tail: subject filter, e.g. astro.events.acme.holiday.*")
	projector := fs.String("projector", "", "parked, redrive: only this projector")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	log, nc, closeLog, err := openLog(ctx, client)
	if err != nil {
		return err
	}
	defer closeLog()
	out := json.NewEncoder(stdout)
	switch args[0] {
	case "tail":
		from := natslog.ScanFrom{Seq: *fromSeq}
		if *since != "" {
			if from.Time, err = time.Parse(time.RFC3339Nano, *since); err != nil {
				return fmt.Errorf("--since: want an RFC 3339 time: %w", err)
			}
		}
		want := strings.FieldsFunc(*types, func(r rune) bool { return r == ',' })
		print := func(e events.Event) error {
			if len(want) > 0 && !slices.Contains(want, e.Type) {
				return nil
			}
			return out.Encode(tailLine(e))
		}
		if *follow {
			err = log.Follow(ctx, *filter, from, print)
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		return log.Scan(ctx, *filter, from, print)
	case "parked":
		return log.ListParked(ctx, *projector, func(p natslog.Parked) error {
			return out.Encode(map[string]any{"projector": p.Projector, "seq": p.Seq, "subject": p.Subject,
				"type": p.Header.Get("ce-type"), "reason": p.Reason, "parkedAt": p.ParkedAt, "parkSeq": p.ParkSeq})
		})
	case "redrive":
		names := projections.Names()
		if *projector != "" {
			names = []string{*projector}
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
	fmt.Fprintln(stderr, usage)
	return fmt.Errorf("events: unknown command %q", args[0])
}

// tailLine is an event as a consumer sees it: envelope and data.
func tailLine(e events.Event) map[string]any {
	return map[string]any{
		"seq": e.Seq, "subject": events.Subject(e.WorkspaceID, e.Aggregate), "id": e.ID, "type": e.Type,
		"version": e.Version, "time": e.Time, "workspaceId": e.WorkspaceID,
		"aggregate": map[string]string{"kind": e.Aggregate.Kind, "id": e.Aggregate.ID},
		"actorId":   e.ActorID, "integrationName": e.Integration, "correlationId": e.CorrelationID,
		"data": json.RawMessage(e.Data),
	}
}
