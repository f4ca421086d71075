package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"astro/commands"
	"astro/commands/erasure"
	"astro/commands/notifications"
	"astro/events/natsserver"
)

// eraseUsage is the usage of `astro erase`.
const eraseUsage = `Usage: astro erase user --workspace WS --user ID [--by WHO] [--nats-url URL]
       astro erase workspace --workspace WS [--by WHO] [--nats-url URL]`

// runErase is `astro erase user|workspace`: erasure on request, for an
// operator, with Astro's own rights on the log. It prints the receipt.
func runErase(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "user" && args[0] != "workspace") {
		fmt.Fprintln(stderr, eraseUsage)
		return errors.New("erase: want user or workspace")
	}
	scope := args[0]
	fs := flag.NewFlagSet("astro erase "+scope, flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := natsClient{Role: natsserver.UserAstro}
	client.addFlags(fs, getenv)
	workspace := fs.String("workspace", "", "the workspace")
	user := fs.String("user", "", "the user whose notifications are erased (erase user)")
	by := fs.String("by", "operator", "who asks: recorded as the erasure event's actor")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *workspace == "" || (scope == "user") != (*user != "") {
		fmt.Fprintln(stderr, eraseUsage)
		return errors.New("erase: --workspace is required, and --user with erase user only")
	}
	log, _, closeLog, err := openLog(ctx, client)
	if err != nil {
		return err
	}
	defer closeLog()
	inboxes, err := commands.NewStore(log, log.Snapshots(), notifications.NewInbox, commands.StoreConfig{Name: notifications.SnapshotName})
	if err != nil {
		return err
	}
	compactor, err := notifications.NewCompactor(inboxes, log, log, log.ErasureLedger(), time.Now, notifications.CompactorConfig{})
	if err != nil {
		return err
	}
	eraser, err := erasure.New(log, log.Snapshots(), log.ErasureLedger(), compactor, time.Now, nil)
	if err != nil {
		return err
	}
	caller := commands.Caller{WorkspaceID: *workspace, UserID: *by, Scopes: []string{erasure.ScopeErase}, Integration: "astro-erase"}
	var rec erasure.Receipt
	if scope == "user" {
		rec, err = eraser.User(ctx, caller, *user)
	} else {
		rec, err = eraser.Workspace(ctx, caller)
	}
	if err != nil {
		if e := (*commands.Error)(nil); errors.As(err, &e) && e.Message != "" {
			return fmt.Errorf("erase %s: %s", scope, e.Message)
		}
		return fmt.Errorf("erase %s: %w", scope, err)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(rec)
}
