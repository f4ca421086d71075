package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"astro/events/natslog"
	"astro/events/natsserver"
	"astro/query/history"
)

// runAudit prints a holiday's history straight from the log: no database,
// no read model, nothing between the question and the record.
func runAudit(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("astro audit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: astro audit holiday ID --workspace WS [--json]")
		fs.PrintDefaults()
	}
	ws := fs.String("workspace", "", "workspace id")
	asJSON := fs.Bool("json", false, "one JSON object per line")
	client := natsClient{Role: natsserver.UserConsumer}
	client.addFlags(fs, getenv)
	if len(args) < 1 || args[0] != "holiday" {
		fs.Usage()
		return errors.New("audit: want: holiday ID")
	}
	// The id may come before the flags or among them.
	id, rest := "", args[1:]
	for {
		if err := fs.Parse(rest); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		if id != "" {
			fs.Usage()
			return fmt.Errorf("audit: unexpected argument %q", fs.Arg(0))
		}
		id, rest = fs.Arg(0), fs.Args()[1:]
	}
	if id == "" {
		fs.Usage()
		return errors.New("audit: want: holiday ID")
	}
	if *ws == "" {
		fs.Usage()
		return errors.New("audit: --workspace is required")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	log, _, closeLog, err := openLog(ctx, client)
	if err != nil {
		return err
	}
	defer closeLog()
	h, err := history.NewHolidays(log)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	if !*asJSON {
		fmt.Fprintln(tw, "SEQ\tTIME\tEVENT\tACTOR\tINTEGRATION\tOLD REASON\tNEW REASON")
	}
	// Page by page: a holiday renamed without end is read in bounded memory.
	for after := uint64(0); ; {
		entries, err := h.History(ctx, *ws, id, after, history.MaxPage)
		if err != nil {
			return fmt.Errorf("audit holiday %s: %w", id, err)
		}
		if *asJSON {
			if err := writeJSONLines(stdout, entries); err != nil {
				return err
			}
		} else {
			for _, e := range entries {
				old := "-"
				if e.OldReason != nil {
					old = fmt.Sprintf("%q", *e.OldReason)
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%q\n", e.Sequence, e.Time.Format(time.RFC3339Nano), terminalSafe(e.Type), terminalSafe(e.ActorID), terminalSafe(or(e.IntegrationName, "-")), old, e.NewReason)
			}
		}
		if len(entries) < history.MaxPage {
			break
		}
		after = entries[len(entries)-1].Sequence
	}
	return tw.Flush()
}

// terminalSafe is s as the audit table prints it: as it is when every
// character shows as itself, else quoted with Go escapes as the reasons
// are. A name recorded by an older release may hold a control character
// or a bidirectional override, which would move the columns on the
// operator's terminal or make the row read other than it is recorded.
func terminalSafe(s string) string {
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}

// openLog opens the log as a tool sees it, bound to the existing streams so
// that nothing about them changes. As the consumer it reaches only the
// event stream, which is all that audits and tails read.
func openLog(ctx context.Context, client natsClient) (*natslog.Log, *nats.Conn, func(), error) {
	nc, closeConn, err := client.connect(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	log, err := natslog.Open(ctx, nc, natslog.Config{Bind: true, EventsOnly: client.Role == natsserver.UserConsumer})
	if err != nil {
		closeConn()
		return nil, nil, nil, err
	}
	return log, nc, closeConn, nil
}

// writeJSONLines writes rows as JSON, one document a line: the --json
// output of the commands that otherwise print a table.
func writeJSONLines[T any](w io.Writer, rows []T) error {
	enc := json.NewEncoder(w)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}
