package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"astro/events/natsserver"
	"astro/projections"
	"astro/projections/pgconn"
)

// postgresURLFile holds the URL of the running service's private
// PostgreSQL, in its data directory.
const postgresURLFile = "postgres-url"

// runProjections is `astro projections ...`: the read models as an
// operator sees them.
func runProjections(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	usage := "Usage: astro projections status [--json] [--database-url URL] [--nats-url URL]\n       astro projections rebuild NAME [--force] [--wait] [--batch N] [--database-url URL] [--nats-url URL]"
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return errors.New("projections: want status or rebuild")
	}
	switch args[0] {
	case "status":
		return projectionsStatus(ctx, args[1:], getenv, stdout, stderr)
	case "rebuild":
		return projectionsRebuild(ctx, args[1:], getenv, stdout, stderr)
	}
	fmt.Fprintln(stderr, usage)
	return fmt.Errorf("projections: unknown command %q", args[0])
}

// projectionsStatus is `astro projections status`: each projector's
// position, lag and state, from any machine that reaches the log and the
// database.
func projectionsStatus(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("astro projections status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := natsClient{Role: natsserver.UserAstro} // the projectors' consumers are Astro's own
	client.addFlags(fs, getenv)
	dbURL := envString(fs, getenv, "database-url", "ASTRO_DATABASE_URL", "", "PostgreSQL of the read models; default: the running service's private one, found in its data directory")
	asJSON := fs.Bool("json", false, "one JSON object a projector instead of a table")
	if err := fs.Parse(args); err != nil {
		return err
	}
	private := *dbURL == ""
	if private {
		b, err := os.ReadFile(filepath.Join(client.DataDir, postgresURLFile))
		if err != nil {
			return errors.New("projections status: set --database-url (ASTRO_DATABASE_URL), or run it beside a running service with a private PostgreSQL: the read models' checkpoints are there")
		}
		*dbURL = strings.TrimSpace(string(b))
	}
	db, err := pgconn.Open(*dbURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil && private {
		// The address a service wrote when it started: after a crash, that
		// PostgreSQL is gone with it.
		return fmt.Errorf("projections status: the private PostgreSQL the service in %s started does not answer (%v); is the service running? set --database-url otherwise", client.DataDir, err)
	}
	log, _, closeLog, err := openLog(ctx, client)
	if err != nil {
		return err
	}
	defer closeLog()
	var out []projections.Status
	for _, reg := range projections.Registered() {
		st, err := projections.ReadStatus(ctx, log.JetStream(), db, log.Stream(reg.Kinds[0]), reg, time.Now())
		if err != nil {
			return err
		}
		out = append(out, st)
	}
	if *asJSON {
		return writeJSONLines(stdout, out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROJECTOR\tSTATE\tPOSITION\tLOG END\tLAG (EVENTS)\tLAG (OLDEST UNAPPLIED)")
	for _, st := range out {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", st.Projector, st.State, st.Position, st.LogLast, st.LagEvents,
			(time.Duration(st.LagSeconds * float64(time.Second))).Round(time.Millisecond))
	}
	return tw.Flush()
}
