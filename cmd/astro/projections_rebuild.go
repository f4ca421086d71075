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
	"time"

	"astro/events/natsserver"
	"astro/projections"
	"astro/projections/pgconn"
	"astro/projections/pgserver"
)

// projectionsRebuild is `astro projections rebuild NAME`: a new version of
// a read model built beside the live one, compared with it, and switched
// to if they agree (see projections.Rebuild).
func projectionsRebuild(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("astro projections rebuild", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: astro projections rebuild NAME [flags]\n\nNAME is one of: "+strings.Join(projections.Names(), ", ")+"\n\nFlags:")
		fs.PrintDefaults()
	}
	client := natsClient{Role: natsserver.UserAstro}
	client.addFlags(fs, getenv)
	dbURL := envString(fs, getenv, "database-url", "ASTRO_DATABASE_URL", "", "PostgreSQL URL of the read models; default: the private PostgreSQL of the data directory")
	force := fs.Bool("force", false, "switch even when the rebuilt read model differs from the live one, printing the differences")
	wait := fs.Bool("wait", false, "wait for another rebuild of the same read model to end instead of failing")
	batch := fs.Int("batch", 0, "events per transaction (default 20000)")
	// The name may come before or after the flags.
	if err := fs.Parse(args); err != nil {
		return err
	}
	var name string
	if fs.NArg() > 0 {
		name = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return err
		}
	}
	if name == "" || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("projections rebuild: want one read model's name")
	}
	// The log first: with no service running it takes the data
	// directory's lock (with --nats-url the log is elsewhere, and the lock
	// is taken below), so that no service starts on the directory while
	// this runs and takes over the PostgreSQL started below, which dies
	// with this tool.
	evlog, _, closeLog, err := openLog(ctx, client)
	if err != nil {
		return err
	}
	defer closeLog()
	url := *dbURL
	if url == "" {
		if client.URL != "" {
			if release, err := lockDataDir(client.DataDir); err == nil {
				defer release()
			} // else the service runs, and its PostgreSQL is the one found
		}
		// The running service's private PostgreSQL, found through its pid
		// file; started if the service is not running, and then stopped
		// with this tool (it dies with its parent).
		pg, err := pgserver.Start(ctx, pgserver.Config{DataDir: filepath.Join(client.DataDir, "postgres")})
		if err != nil {
			return fmt.Errorf("private PostgreSQL of %s: %w (or set --database-url)", client.DataDir, err)
		}
		url = pg.URL()
	}
	db, err := pgconn.Open(url)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("database: %w", err)
	}
	// The live read model's tables and checkpoint columns must exist; this
	// is what a starting service does, under the same lock.
	if err := projections.Migrate(ctx, db); err != nil {
		return err
	}
	var m projections.Model
	var kind string
	for _, reg := range projections.Registered() {
		if reg.Name == name {
			kind = reg.Kinds[0]
		}
	}
	switch name {
	case projections.NotificationsName:
		m, err = projections.NewNotifications(ctx, db)
	case projections.HolidaysName:
		m, err = projections.NewHolidays(ctx, db)
	default:
		return fmt.Errorf("projections rebuild: no read model %q; want one of %s", name, strings.Join(projections.Names(), ", "))
	}
	if err != nil {
		return err
	}
	bar := progressPrinter(stdout)
	res, err := projections.Rebuild(ctx, evlog.JetStream(), db, m, projections.RebuildConfig{
		Stream: evlog.Stream(kind), Batch: *batch, Force: *force, Wait: *wait,
		Progress: bar.print, ProgressEvery: bar.every,
	})
	bar.done()
	printDiffs(stdout, res.Diffs)
	if errors.Is(err, projections.ErrDisagree) {
		return fmt.Errorf("%s: %w (the rebuilt one is kept: rerun with --force to switch to it)", name, projections.ErrDisagree)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "switched %s to the rebuilt read model (version %d) at log position %d: %d events applied in %s\n",
		name, res.Version, res.Position, res.Applied, res.Elapsed.Round(time.Millisecond))
	return nil
}

// progress shows a rebuild's progress: a bar redrawn in place on a
// terminal, a plain line every few seconds otherwise (a log, a pipe).
type progress struct {
	w        io.Writer
	terminal bool
	every    time.Duration
	drawn    bool
}

func progressPrinter(w io.Writer) *progress {
	p := &progress{w: w, every: 5 * time.Second}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.terminal, p.every = true, 200*time.Millisecond
		}
	}
	return p
}

func (p *progress) print(s projections.Progress) {
	eta := "-"
	if s.ETA > 0 {
		eta = s.ETA.Round(time.Second).String()
	}
	if !p.terminal {
		fmt.Fprintf(p.w, "%s: %d events applied, at log position %d, %.0f events/s, %d to go, ETA %s\n",
			s.Phase, s.Applied, s.Position, s.Rate, s.Remaining, eta)
		return
	}
	const width = 30
	done := 1.0
	if total := s.Applied + int64(s.Remaining); total > 0 {
		done = float64(s.Applied) / float64(total)
	}
	filled := int(done * width)
	fmt.Fprintf(p.w, "\r\033[K%-10s [%s%s] %3.0f%% %d events  %.0f/s  ETA %s",
		s.Phase, strings.Repeat("#", filled), strings.Repeat(".", width-filled), 100*done, s.Applied, s.Rate, eta)
	p.drawn = true
}

func (p *progress) done() {
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}

// printDiffs prints what each side holds that the other does not.
func printDiffs(w io.Writer, diffs []projections.Diff) {
	for _, d := range diffs {
		fmt.Fprintf(w, "%s: %d rows only in the %s read model", d.Table, d.Rows, d.Side)
		if int64(len(d.Sample)) < d.Rows {
			fmt.Fprintf(w, " (the first %d)", len(d.Sample))
		}
		fmt.Fprintln(w, ":")
		for _, row := range d.Sample {
			fmt.Fprintln(w, "  "+row)
		}
	}
}
