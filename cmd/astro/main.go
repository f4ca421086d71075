// Command astro runs the Astro service, and its tools: development tokens,
// audits of the log, event tails, read-model rebuilds and erasures.
//
//	astro                 run the service (embedded NATS and PostgreSQL by default)
//	astro token ...       print a development token
//	astro audit holiday   print a holiday's history from the log
//	astro events ...      tail the log; list and redrive parked events
//	astro projections status  each projector's position, lag and state
//	astro projections rebuild NAME  rebuild a read model beside the live one, verified before the switch
//	astro erase user|workspace  erase a user's notifications or a whole workspace, on request
//	astro nats-credentials  print what a NATS client of the embedded server needs
//
// Run "astro -h" or "astro token -h" for the flags; every flag also reads
// an ASTRO_* environment variable.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

// defaultMemoryLimit is the Go runtime's soft memory limit when GOMEMLIMIT
// is not set: the collector works harder near it instead of letting the
// heap grow to twice what is live, which keeps the service's resident
// memory under 200 MB at the working set of 10,000 users with 100
// notifications each (BenchmarkMemory). A larger working set takes more;
// set GOMEMLIMIT for it.
const defaultMemoryLimit = 180 << 20

func main() {
	// A process setting, so here and not in run, which tests call many
	// times in one process.
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal starts a graceful shutdown; a second one, while it
	// runs, ends the process at once, as Go's default handling does.
	go func() {
		<-ctx.Done()
		stop()
	}()
	if os.Getenv("GOMAXPROCS") == "" {
		go newProcs().run(ctx)
	}
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "astro:", err)
		os.Exit(1)
	}
}

// run is the whole program; tests drive it as main does.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "token":
			return runToken(args[1:], getenv, stdout, stderr)
		case "audit":
			return runAudit(ctx, args[1:], getenv, stdout, stderr)
		case "events":
			return runEvents(ctx, args[1:], getenv, stdout, stderr)
		case "projections":
			return runProjections(ctx, args[1:], getenv, stdout, stderr)
		case "erase":
			return runErase(ctx, args[1:], getenv, stdout, stderr)
		case "nats-credentials":
			return runNATSCredentials(args[1:], getenv, stdout, stderr)
		case "serve":
			args = args[1:]
		}
	}
	cfg, err := parseConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	return serve(ctx, cfg, stdout, stderr)
}
