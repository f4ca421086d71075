package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"
	"time"

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
	natsURL := fs.String("nats-url", getenv("ASTRO_NATS_URL"), "NATS server; default: the running service's, else its data directory ($ASTRO_NATS_URL)")
	dataDir := fs.String("data-dir", or(getenv("ASTRO_DATA_DIR"), ".astro"), "data directory of the embedded log ($ASTRO_DATA_DIR)")
	if len(args) < 2 || args[0] != "holiday" {
		fs.Usage()
		return errors.New("audit: want: holiday ID")
	}
	id := args[1]
	if err := fs.Parse(args[2:]); err != nil {
		return err
	}
	if *ws == "" {
		fs.Usage()
		return errors.New("audit: --workspace is required")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	log, _, closeLog, err := openLog(ctx, *natsURL, *dataDir)
	if err != nil {
		return err
	}
	defer closeLog()
	h, err := history.NewHolidays(log)
	if err != nil {
		return err
	}
	entries, err := h.History(ctx, *ws, id)
	if err != nil {
		return fmt.Errorf("audit holiday %s: %w", id, err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		for _, e := range entries {
			if err := enc.Encode(e); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tEVENT\tACTOR\tINTEGRATION\tOLD REASON\tNEW REASON")
	for _, e := range entries {
		old := "-"
		if e.OldReason != nil {
			old = fmt.Sprintf("%q", *e.OldReason)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%q\n", e.Sequence, e.Time.Format(time.RFC3339Nano), e.Type, e.ActorID, or(e.IntegrationName, "-"), old, e.NewReason)
	}
	return tw.Flush()
}

// openLog opens the log as a tool sees it, bound to the existing streams so
// that nothing about them changes.
func openLog(ctx context.Context, url, dataDir string) (*natslog.Log, *nats.Conn, func(), error) {
	nc, closeConn, err := openLogConn(ctx, url, dataDir)
	if err != nil {
		return nil, nil, nil, err
	}
	log, err := natslog.Open(ctx, nc, natslog.Config{Bind: true})
	if err != nil {
		closeConn()
		return nil, nil, nil, err
	}
	return log, nc, closeConn, nil
}

// openLogConn connects to the log: the given NATS server; else the running
// service's embedded server on its default address; else, when the service
// is not running, the embedded store in the data directory itself.
func openLogConn(ctx context.Context, url, dataDir string) (*nats.Conn, func(), error) {
	if url != "" {
		nc, err := nats.Connect(url)
		if err != nil {
			return nil, nil, fmt.Errorf("connect to %s: %w", url, err)
		}
		return nc, nc.Close, nil
	}
	if nc, err := nats.Connect("nats://127.0.0.1:4222", nats.Timeout(time.Second)); err == nil {
		return nc, nc.Close, nil
	}
	srv, err := natsserver.Start(ctx, natsserver.Config{StoreDir: filepath.Join(dataDir, "nats"), Listen: "off"})
	if err != nil {
		return nil, nil, fmt.Errorf("open the log in %s: %w", dataDir, err)
	}
	nc, err := srv.Connect()
	if err != nil {
		srv.Shutdown()
		return nil, nil, err
	}
	return nc, func() { nc.Close(); srv.Shutdown() }, nil
}
