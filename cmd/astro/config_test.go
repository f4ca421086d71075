package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"astro/api/auth"
	"astro/events/natsserver"
)

func TestSecondInstanceOnADataDirIsRefused(t *testing.T) {
	dir := t.TempDir()
	release, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	env := map[string]string{"ASTRO_DATA_DIR": dir, "ASTRO_HTTP_ADDR": "127.0.0.1:0", "ASTRO_NATS_LISTEN": "off"}
	err = run(context.Background(), nil, func(k string) string { return env[k] }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "in use by another astro") {
		t.Fatalf("second instance on a locked data dir: %v", err)
	}
	release()
	if r, err := lockDataDir(dir); err != nil {
		t.Fatalf("lock not released: %v", err)
	} else {
		r()
	}
}

func TestConfig(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		args []string
		ok   bool
		rate float64
	}{
		{"defaults", nil, nil, true, 0},
		{"external servers turn the rate limit on", map[string]string{"ASTRO_NATS_URL": "nats://x"}, nil, true, 50},
		{"explicit rate", nil, []string{"--rate-limit", "7"}, true, 7},
		{"rate off", map[string]string{"ASTRO_DATABASE_URL": "postgres://x"}, []string{"--rate-limit", "off"}, true, 0},
		{"bad rate", nil, []string{"--rate-limit", "fast"}, false, 0},
		{"short secret", map[string]string{"ASTRO_JWT_SECRET": "short"}, nil, false, 0},
		{"bad replicas", nil, []string{"--stream-replicas", "9"}, false, 0},
		{"bad log level", nil, []string{"--log-level", "loud"}, false, 0},
		{"external NATS with a user", map[string]string{"ASTRO_NATS_URL": "nats://x", "ASTRO_NATS_USER": "astro", "ASTRO_NATS_PASSWORD": "p"}, nil, true, 50},
		{"external NATS with a creds file", map[string]string{"ASTRO_NATS_URL": "nats://x", "ASTRO_NATS_CREDS": "/x.creds"}, nil, true, 50},
		{"NATS user for the embedded server", map[string]string{"ASTRO_NATS_USER": "astro", "ASTRO_NATS_PASSWORD": "p"}, nil, false, 0},
		{"NATS user without a password", map[string]string{"ASTRO_NATS_URL": "nats://x", "ASTRO_NATS_USER": "astro"}, nil, false, 0},
		{"short stream ticket key", map[string]string{"ASTRO_STREAM_TICKET_KEY": "short"}, nil, false, 0},
		{"stream ticket valid too long", nil, []string{"--stream-ticket-ttl", "2h"}, false, 0},
		{"no streams per user", nil, []string{"--streams-per-user", "0"}, false, 0},
		{"bad streams max", nil, []string{"--streams-max", "many"}, false, 0},
		{"heartbeat too often", nil, []string{"--stream-heartbeat", "10ms"}, false, 0},
		{"stream settings", map[string]string{"ASTRO_STREAMS_MAX": "50000", "ASTRO_STREAM_HEARTBEAT": "30s"}, nil, true, 0},
		{"NATS user and creds file", map[string]string{"ASTRO_NATS_URL": "nats://x", "ASTRO_NATS_USER": "astro", "ASTRO_NATS_PASSWORD": "p", "ASTRO_NATS_CREDS": "/x.creds"}, nil, false, 0},
		// What is left after the flags is no command: it started the
		// service ("astro projection status", flags before "token").
		{"a mistyped command", nil, []string{"projection", "status"}, false, 0},
		{"flags before a command", nil, []string{"--data-dir", "/tmp/x", "token"}, false, 0},
		{"negative shutdown grace", nil, []string{"--shutdown-grace", "-1s"}, false, 0},
		{"no shutdown grace", nil, []string{"--shutdown-grace", "0s"}, true, 0},
		{"a database URL that does not parse", map[string]string{"ASTRO_DATABASE_URL": "postgres://astro:s3cret@db:54x32/astro"}, nil, false, 0},
		{"a NATS URL that does not parse", map[string]string{"ASTRO_NATS_URL": "nats://a:4222,nats://astro:s3cret@b:42x22"}, nil, false, 0},
		{"a key=value database string", map[string]string{"ASTRO_DATABASE_URL": "host=db user=astro password=s3cret"}, nil, true, 50},
		{"a database password with a comma", map[string]string{"ASTRO_DATABASE_URL": "postgres://astro:s3cr,et@db:5432/astro"}, nil, true, 50},
		// Only the embedded log can be told to fsync: with an external
		// NATS the setting would be taken and ignored.
		{"log sync always on the embedded log", nil, []string{"--log-sync", "always"}, true, 0},
		{"log sync always with an external NATS", map[string]string{"ASTRO_NATS_URL": "nats://x", "ASTRO_LOG_SYNC": "always"}, nil, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := parseConfig(c.args, func(k string) string { return c.env[k] }, io.Discard)
			if (err == nil) != c.ok {
				t.Fatalf("err %v, want ok=%v", err, c.ok)
			}
			if c.ok && cfg.RateLimit != c.rate {
				t.Fatalf("rate %v, want %v", cfg.RateLimit, c.rate)
			}
		})
	}
}

// A token "astro token" signs is one the service accepts: with the issuer
// and audience it requires, and when the secret setting ends in a
// newline, as one read from a file does (both trim it).
func TestTokenCommandSignsWhatTheServiceTakes(t *testing.T) {
	secret := strings.Repeat("k", 40)
	// The issuer and audience the service requires, too.
	env := map[string]string{"ASTRO_JWT_SECRET": secret + "\n", "ASTRO_DATA_DIR": t.TempDir(),
		"ASTRO_JWT_ISSUER": "https://idp.example", "ASTRO_JWT_AUDIENCE": "astro"}
	var out strings.Builder
	if err := run(t.Context(), []string{"token", "--user", "u", "--workspace", "w"}, func(k string) string { return env[k] }, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	// The service's verifier, made from the same settings as the service
	// makes it.
	cfg, err := parseConfig(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ac, err := authConfig(cfg, time.Now, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	v, err := auth.NewVerifier(t.Context(), ac)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(t.Context(), strings.TrimSpace(out.String())); err != nil {
		t.Fatalf("the service refuses the token astro token signed: %v", err)
	}
}

// No secret of the environment reaches the usage text or an error: a
// mistyped flag prints the usage, and both end up in a log. Each flag's
// default used to be its variable's value, and a URL that did not parse
// came back whole in the error.
func TestSecretsStayOutOfUsageAndErrors(t *testing.T) {
	secrets := map[string]string{
		"ASTRO_JWT_SECRET":        "jwt-" + strings.Repeat("s", 40),
		"ASTRO_STREAM_TICKET_KEY": "ticket-" + strings.Repeat("t", 40),
		"ASTRO_NATS_PASSWORD":     "nats-p4ss",
		"ASTRO_DATABASE_URL":      "postgres://astro:db-p4ss/x@db/astro", // the parser quotes ":db-p4ss" as a port
	}
	env := func(k string) string { return secrets[k] }
	for _, args := range [][]string{
		{"--htp-addr", ":1"}, {"-h"}, {"serve"},
		{"events", "tail", "--bogus"}, {"erase", "user", "--bogus"},
		{"projections", "status", "--bogus"}, {"projections", "rebuild", "--bogus"},
		{"nats-credentials", "--bogus"}, {"token", "--bogus"}, {"audit", "holiday", "--bogus"},
	} {
		var out, errOut strings.Builder
		err := run(t.Context(), args, env, &out, &errOut)
		said := out.String() + errOut.String() + fmt.Sprint(err)
		for _, secret := range []string{secrets["ASTRO_JWT_SECRET"], secrets["ASTRO_STREAM_TICKET_KEY"], "nats-p4ss", "db-p4ss"} {
			if strings.Contains(said, secret) {
				t.Errorf("astro %s shows %q:\n%s", strings.Join(args, " "), secret, said)
			}
		}
	}
}

// With an identity provider's keys (ASTRO_JWKS_URL) and no secret, the
// service takes no token signed with a secret: astro token refuses, where
// it made a secret in the data directory and signed a token answered 401.
func TestTokenCommandRefusesWhenTheServiceTakesJWKSOnly(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"ASTRO_JWKS_URL": "https://idp.example/jwks.json", "ASTRO_DATA_DIR": dir}
	var out strings.Builder
	err := run(t.Context(), []string{"token", "--user", "u", "--workspace", "w"}, func(k string) string { return env[k] }, &out, io.Discard)
	if err == nil || out.Len() > 0 {
		t.Fatalf("astro token with JWKS only: %v, printed %q", err, out.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "jwt-secret")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a secret was kept in the data directory: %v", err)
	}
}

// Processes that start at once on a new data directory (the service and
// astro nats-credentials) agree on one set of NATS passwords. One that
// read the file another had just created found it empty, and called it
// damaged: delete it, it said, and the running service's clients would
// then have other passwords.
func TestNATSPasswordsKeptOnceWhenStartedTogether(t *testing.T) {
	for round := range 20 {
		dir := t.TempDir()
		got := make([]natsserver.Passwords, 8)
		errs := make([]error, len(got))
		var wg sync.WaitGroup
		for i := range got {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i], errs[i] = natsPasswords(dir)
			}()
		}
		wg.Wait()
		for i := range got {
			if errs[i] != nil || got[i] != got[0] {
				t.Fatalf("round %d, process %d: %+v, %v; the first got %+v", round, i, got[i], errs[i], got[0])
			}
		}
	}
}

// TestNATSVersions: the projectors move their consumers back with the
// consumer reset API, which NATS 2.14 brought; on 2.12 (what deploy/
// pinned) a projector stopped for good after a crash.
func TestNATSVersions(t *testing.T) {
	for v, ok := range map[string]bool{
		"2.15.2": true, "2.14.0": true, "2.14.0-beta.1": true, "3.0.0": true, "2.100.0": true,
		"2.12.15": false, "2.13.9": false, "1.99.0": false,
		"": true, "dev": true, // unreadable: the server's own answers decide
	} {
		if got := natsAtLeast(v, minNATS); got != ok {
			t.Errorf("natsAtLeast(%q) = %v, want %v", v, got, ok)
		}
	}
}

// TestStatusAfterTheServiceCrashed: the service keeps its private
// PostgreSQL's address in the data directory for the tools; after a
// kill -9 the address is stale, and status said only "connection refused".
func TestStatusAfterTheServiceCrashed(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := l.Addr().String()
	l.Close()
	if err := os.WriteFile(filepath.Join(dir, postgresURLFile), []byte("postgres://astro:pw@"+gone+"/astro?sslmode=disable\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = run(t.Context(), []string{"projections", "status"}, func(k string) string { return map[string]string{"ASTRO_DATA_DIR": dir}[k] }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "is the service running?") || strings.Contains(err.Error(), "pw@") {
		t.Fatalf("status with the service gone: %v", err)
	}
}
