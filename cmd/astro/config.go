package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"astro/api/auth"

	"go.opentelemetry.io/otel/trace"
)

// Config is everything the service reads from flags and the environment.
type Config struct {
	HTTPAddr       string
	DataDir        string
	NATSURL        string
	NATSListen     string
	NATSUser       string // external NATS: Astro's user and password,
	NATSPassword   string
	NATSCreds      string // or a NATS credentials file (JWT and seed)
	DatabaseURL    string
	JWTSecret      string
	JWKSURL        string
	JWTIssuer      string
	JWTAudience    string
	StreamReplicas int
	LogSyncAlways  bool    // embedded log: fsync every append
	RateLimit      float64 // requests a second per caller; 0: off
	RateBurst      int
	LogLevel       slog.Level
	ShutdownGrace  time.Duration
	RequestTimeout time.Duration
	// MetricsAddr, when set, serves /metrics there instead of on the API's
	// address.
	MetricsAddr string
	// DebugAddr, when set, serves Go's profiles (net/http/pprof) there.
	DebugAddr string
	// ReadyMaxLagEvents and ReadyMaxLag bound projector lag: past either,
	// /readyz answers 503. 0 turns a bound off.
	ReadyMaxLagEvents uint64
	ReadyMaxLag       time.Duration
	// Tracing: the OTEL_* variables ask for traces (see tracingFromEnv).
	Tracing bool
	// TracerProvider, when set, receives the spans instead of an OTLP
	// exporter: for tests, which read them from memory.
	TracerProvider trace.TracerProvider
	// The notification stream.
	StreamTicketKey string // signs stream tickets; empty: generated and kept in the data directory
	StreamTicketTTL time.Duration
	StreamsPerUser  int
	StreamsMax      int
	StreamHeartbeat time.Duration
	// Compaction of inboxes (notifications.Schedule).
	CompactEvery int
	EraseWithin  time.Duration
}

// usage lists the program's commands; each tool's -h gives its flags.
const usage = `Usage: astro [serve] [flags]
       astro token --user ID --workspace ID [--scope "..."]
       astro audit holiday ID --workspace WS [--json]
       astro events tail|parked|redrive [flags]
       astro projections status|rebuild [flags]
       astro erase user|workspace [flags]
       astro nats-credentials --role consumer|service [--url]`

// defaultOf is the service's default for the setting name. The tools take
// theirs from here, so that a changed default cannot split them from the
// service.
func defaultOf(name string) string {
	for _, s := range settings {
		if s.name == name {
			return s.def
		}
	}
	panic("astro: no setting " + name) // a typo here, which any test of the tool finds
}

// setting is one flag with its environment variable and default.
type setting struct {
	name, env, def, usage string
}

var settings = []setting{
	{"http-addr", "ASTRO_HTTP_ADDR", "127.0.0.1:8080", "address the HTTP API listens on"},
	{"data-dir", "ASTRO_DATA_DIR", ".astro", "directory for embedded NATS and PostgreSQL data and the development JWT secret"},
	{"nats-url", "ASTRO_NATS_URL", "", "NATS server URL; empty runs an embedded JetStream server"},
	{"nats-listen", "ASTRO_NATS_LISTEN", "127.0.0.1:4222", "embedded NATS: also accept clients on this address; 'off' for in-process only"},
	{"nats-user", "ASTRO_NATS_USER", "", "external NATS: the user Astro connects as (see deploy/nats-server.conf)"},
	{"nats-password", "ASTRO_NATS_PASSWORD", "", "external NATS: that user's password"},
	{"nats-creds", "ASTRO_NATS_CREDS", "", "external NATS: a credentials file (JWT and NKey seed) instead of user and password"},
	{"database-url", "ASTRO_DATABASE_URL", "", "PostgreSQL URL; empty runs a private PostgreSQL from the installed binaries"},
	{"jwt-secret", "ASTRO_JWT_SECRET", "", "HS256 secret (at least 32 bytes); empty without a JWKS URL: generated and kept in the data directory"},
	{"jwks-url", "ASTRO_JWKS_URL", "", "JWKS URL for RS256/ES256 tokens (production)"},
	{"jwt-issuer", "ASTRO_JWT_ISSUER", "", "required token issuer (iss), when set"},
	{"jwt-audience", "ASTRO_JWT_AUDIENCE", "", "required token audience (aud), when set"},
	{"log-sync", "ASTRO_LOG_SYNC", "interval", "embedded log durability: 'always' answers an append once it is on disk (survives power loss; concurrent appends share an fsync), 'interval' syncs every 2 minutes (survives a process crash)"},
	{"stream-replicas", "ASTRO_STREAM_REPLICAS", "1", "replicas of the event streams (3 on a JetStream cluster)"},
	{"rate-limit", "ASTRO_RATE_LIMIT", "auto", "requests a second per caller (workspace and user), 'off', or 'auto': 50 with external NATS or PostgreSQL, off when both are embedded"},
	{"rate-burst", "ASTRO_RATE_BURST", "0", "burst of requests allowed above the rate; 0: twice the rate"},
	{"log-level", "ASTRO_LOG_LEVEL", "info", "debug, info, warn or error"},
	{"shutdown-grace", "ASTRO_SHUTDOWN_GRACE", "10s", "how long a shutdown waits for requests in flight"},
	{"request-timeout", "ASTRO_REQUEST_TIMEOUT", "30s", "every request's deadline; past it the request is cancelled and answers 503 with Retry-After"},
	{"metrics-addr", "ASTRO_METRICS_ADDR", "", "serve /metrics on this address instead of the API's (e.g. :9090, kept off the public port)"},
	{"debug-addr", "ASTRO_DEBUG_ADDR", "", "serve Go's profiles (/debug/pprof/) on this address, to profile the service under load; keep it off public networks"},
	{"ready-max-lag-events", "ASTRO_READY_MAX_LAG_EVENTS", "100000", "/readyz answers 503 while a projector has more events than this not applied; 0: no bound"},
	{"ready-max-lag", "ASTRO_READY_MAX_LAG", "30s", "/readyz answers 503 while a projector's oldest unapplied event is older than this; 0: no bound"},
	{"stream-ticket-key", "ASTRO_STREAM_TICKET_KEY", "", "key (at least 32 bytes) that signs notification stream tickets and seals log positions, the same on every instance; empty: generated and kept in the data directory"},
	{"stream-ticket-ttl", "ASTRO_STREAM_TICKET_TTL", "5m", "how long a stream ticket opens the notification stream"},
	{"streams-per-user", "ASTRO_STREAMS_PER_USER", "5", "notification streams one user may hold open on an instance; more answer 429"},
	{"streams-max", "ASTRO_STREAMS_MAX", "10000", "notification streams an instance holds open; more answer 429"},
	{"stream-heartbeat", "ASTRO_STREAM_HEARTBEAT", "15s", "how often an idle notification stream sends a heartbeat comment"},
	{"compact-every", "ASTRO_COMPACT_EVERY", "1000", "compact an inbox once it has had this many events since its last compaction"},
	{"erase-within", "ASTRO_ERASE_WITHIN", "24h", "a deleted notification's content is gone from the log within this long"},
}

func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet("astro", flag.ContinueOnError)
	fs.SetOutput(stderr)
	vals := map[string]*string{}
	for _, s := range settings {
		vals[s.name] = envString(fs, getenv, s.name, s.env, s.def, s.usage)
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "%s\n\nFlags of the service (each also read from the environment variable shown):\n", usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		// A mistyped command ("projection status") or flags before a
		// command would otherwise start the whole service.
		return Config{}, fmt.Errorf("unknown command or argument %q; see astro -h", fs.Arg(0))
	}
	get := func(n string) string { return strings.TrimSpace(*vals[n]) }
	c := Config{
		HTTPAddr: get("http-addr"), DataDir: get("data-dir"), NATSURL: get("nats-url"), NATSListen: get("nats-listen"),
		NATSUser: get("nats-user"), NATSPassword: *vals["nats-password"], NATSCreds: get("nats-creds"),
		DatabaseURL: get("database-url"), JWTSecret: get("jwt-secret"), JWKSURL: get("jwks-url"),
		JWTIssuer: get("jwt-issuer"), JWTAudience: get("jwt-audience"), StreamTicketKey: get("stream-ticket-key"),
	}
	var err error
	if c.StreamReplicas, err = strconv.Atoi(get("stream-replicas")); err != nil || c.StreamReplicas < 1 || c.StreamReplicas > 5 {
		return Config{}, fmt.Errorf("stream-replicas: want 1 to 5, got %q", get("stream-replicas"))
	}
	switch ls := get("log-sync"); ls {
	case "always":
		c.LogSyncAlways = true
	case "interval":
	default:
		return Config{}, fmt.Errorf("log-sync: want 'always' or 'interval', got %q", ls)
	}
	switch rl := get("rate-limit"); rl {
	case "auto":
		if c.NATSURL != "" || c.DatabaseURL != "" {
			c.RateLimit = 50
		}
	case "off", "0":
	default:
		if c.RateLimit, err = strconv.ParseFloat(rl, 64); err != nil || c.RateLimit < 0 || math.IsInf(c.RateLimit, 0) || math.IsNaN(c.RateLimit) {
			return Config{}, fmt.Errorf("rate-limit: want a positive number, 'off' or 'auto', got %q", rl)
		}
	}
	if c.RateBurst, err = strconv.Atoi(get("rate-burst")); err != nil || c.RateBurst < 0 {
		return Config{}, fmt.Errorf("rate-burst: want a whole number, got %q", get("rate-burst"))
	}
	if c.RateBurst == 0 {
		c.RateBurst = max(1, int(2*c.RateLimit))
	}
	if err := c.LogLevel.UnmarshalText([]byte(get("log-level"))); err != nil {
		return Config{}, fmt.Errorf("log-level: %w", err)
	}
	if c.ShutdownGrace, err = time.ParseDuration(get("shutdown-grace")); err != nil || c.ShutdownGrace < 0 {
		return Config{}, fmt.Errorf("shutdown-grace: want a duration of 0 or more, got %q", get("shutdown-grace"))
	}
	for name, urls := range map[string][]string{
		"nats-url":     strings.Split(c.NATSURL, ","), // NATS takes a list
		"database-url": {c.DatabaseURL},
		"jwks-url":     {c.JWKSURL},
	} {
		if !validURLs(urls) {
			// Not repeated, nor the parser's words, which quote the part
			// it stopped at: it may hold a password.
			return Config{}, fmt.Errorf("%s: not a valid URL", name)
		}
	}
	if c.RequestTimeout, err = time.ParseDuration(get("request-timeout")); err != nil || c.RequestTimeout <= 0 {
		return Config{}, fmt.Errorf("request-timeout: want a positive duration, got %q", get("request-timeout"))
	}
	c.MetricsAddr = get("metrics-addr")
	c.DebugAddr = get("debug-addr")
	if c.ReadyMaxLagEvents, err = strconv.ParseUint(get("ready-max-lag-events"), 10, 64); err != nil {
		return Config{}, fmt.Errorf("ready-max-lag-events: want a whole number, got %q", get("ready-max-lag-events"))
	}
	if c.ReadyMaxLag, err = time.ParseDuration(get("ready-max-lag")); err != nil || c.ReadyMaxLag < 0 {
		return Config{}, fmt.Errorf("ready-max-lag: want a duration such as 30s, got %q", get("ready-max-lag"))
	}
	if c.Tracing, err = tracingFromEnv(getenv); err != nil {
		return Config{}, err
	}
	if c.StreamTicketTTL, err = time.ParseDuration(get("stream-ticket-ttl")); err != nil || c.StreamTicketTTL <= 0 || c.StreamTicketTTL > time.Hour {
		return Config{}, fmt.Errorf("stream-ticket-ttl: want a positive duration of at most 1h, got %q", get("stream-ticket-ttl"))
	}
	if c.CompactEvery, err = strconv.Atoi(get("compact-every")); err != nil || c.CompactEvery < 1 {
		return Config{}, fmt.Errorf("compact-every: want a positive whole number, got %q", get("compact-every"))
	}
	if c.EraseWithin, err = time.ParseDuration(get("erase-within")); err != nil || c.EraseWithin < time.Second {
		return Config{}, fmt.Errorf("erase-within: want a duration of at least 1s, such as 24h, got %q", get("erase-within"))
	}
	if c.StreamsPerUser, err = strconv.Atoi(get("streams-per-user")); err != nil || c.StreamsPerUser < 1 {
		return Config{}, fmt.Errorf("streams-per-user: want a positive whole number, got %q", get("streams-per-user"))
	}
	if c.StreamsMax, err = strconv.Atoi(get("streams-max")); err != nil || c.StreamsMax < 1 {
		return Config{}, fmt.Errorf("streams-max: want a positive whole number, got %q", get("streams-max"))
	}
	if c.StreamHeartbeat, err = time.ParseDuration(get("stream-heartbeat")); err != nil || c.StreamHeartbeat < time.Second {
		return Config{}, fmt.Errorf("stream-heartbeat: want a duration of at least 1s, got %q", get("stream-heartbeat"))
	}
	return c, c.Validate()
}

// Validate checks what flags alone cannot.
func (c Config) Validate() error {
	if c.HTTPAddr == "" {
		return errors.New("http-addr is required")
	}
	if c.DataDir == "" && (c.NATSURL == "" || c.DatabaseURL == "" || c.JWTSecret == "" && c.JWKSURL == "") {
		return errors.New("data-dir is required unless NATS, PostgreSQL and token keys are all external")
	}
	if (c.NATSUser != "" || c.NATSPassword != "" || c.NATSCreds != "") && c.NATSURL == "" {
		return errors.New("nats-user, nats-password and nats-creds are for an external NATS (nats-url); the embedded server's credentials are generated in the data directory")
	}
	if (c.NATSUser == "") != (c.NATSPassword == "") {
		return errors.New("nats-user and nats-password go together")
	}
	if c.NATSUser != "" && c.NATSCreds != "" {
		return errors.New("nats-creds replaces nats-user and nats-password: give one or the other")
	}
	if c.LogSyncAlways && c.NATSURL != "" {
		return errors.New("log-sync=always is for the embedded log: an external NATS keeps its own durability (sync_always in its configuration, or a stream of 3 replicas, ASTRO_STREAM_REPLICAS)")
	}
	if c.JWTSecret != "" && len(c.JWTSecret) < 32 {
		return errors.New("jwt-secret must be at least 32 bytes")
	}
	if c.StreamTicketKey != "" && len(c.StreamTicketKey) < 32 {
		return errors.New("stream-ticket-key must be at least 32 bytes")
	}
	return nil
}

// jwtSecret returns the configured HS256 secret, or in development (no
// secret, no JWKS) one generated once and kept in the data directory.
func jwtSecret(jwtSecretSetting, jwksURL, dataDir string) ([]byte, error) {
	if jwtSecretSetting != "" {
		return []byte(jwtSecretSetting), nil
	}
	if jwksURL != "" {
		return nil, nil
	}
	return keptSecret(dataDir, "jwt-secret")
}

// authConfig is how the service configured by cfg verifies tokens.
func authConfig(cfg Config, now func() time.Time, log *slog.Logger) (auth.Config, error) {
	secret, err := jwtSecret(cfg.JWTSecret, cfg.JWKSURL, cfg.DataDir)
	if err != nil {
		return auth.Config{}, err
	}
	return auth.Config{HS256Secret: secret, JWKSURL: cfg.JWKSURL, Issuer: cfg.JWTIssuer, Audience: cfg.JWTAudience, Now: now, Logger: log}, nil
}

// ticketKey returns the configured stream ticket key, or one generated
// once and kept in the data directory, so tickets survive a restart. With
// no data directory the key lives as long as the process: tickets then
// open streams on the instance that issued them only.
func ticketKey(setting, dataDir string) ([]byte, error) {
	if setting != "" {
		return []byte(setting), nil
	}
	if dataDir == "" {
		raw := make([]byte, 32)
		_, _ = rand.Read(raw)
		return raw, nil
	}
	return keptSecret(dataDir, "stream-ticket-key")
}

// keptSecret reads the secret in file name of dataDir, generating it the
// first time.
func keptSecret(dataDir, name string) ([]byte, error) {
	path := filepath.Join(dataDir, name)
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, err
	}
	// Created exclusively: of two processes starting on a fresh data
	// directory (the service and "astro token"), one writes the secret and
	// the other reads it, rather than each keeping its own.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return keptSecretWritten(path, name)
	}
	if err != nil {
		return nil, fmt.Errorf("keep %s: %w", name, err)
	}
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	secret := hex.EncodeToString(raw)
	if _, err := f.WriteString(secret + "\n"); err != nil {
		f.Close()
		return nil, fmt.Errorf("keep %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("keep %s: %w", name, err)
	}
	return []byte(secret), nil
}

// keptSecretWritten reads the secret kept in path, waiting a moment for
// it to be complete when another process is writing it.
func keptSecretWritten(path, name string) ([]byte, error) {
	b, err := readWritten(path, func(b []byte) bool { return len(strings.TrimSpace(string(b))) >= 32 })
	if err != nil {
		return nil, fmt.Errorf("keep %s: %s exists but holds no secret; remove it to have one generated", name, path)
	}
	return []byte(strings.TrimSpace(string(b))), nil
}

// errIncomplete: a kept file was still not what it should hold after the
// moment readWritten waits.
var errIncomplete = errors.New("incomplete")

// readWritten reads the file at path, waiting a moment (half a second) for
// it to be complete, as complete tells, when another process has just
// created it exclusively and is still writing it. A read error, such as
// fs.ErrNotExist, is returned at once.
func readWritten(path string, complete func([]byte) bool) ([]byte, error) {
	for range 50 {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		if complete(b) {
			return b, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil, errIncomplete
}

// envString is fs.String whose value, unless the command line sets it, is
// the environment variable env's, else def. The usage text shows def,
// never the environment's value: secrets come from the environment, and a
// mistyped flag prints the usage to a log.
func envString(fs *flag.FlagSet, getenv func(string) string, name, env, def, usage string) *string {
	p := new(string)
	envStringVar(fs, getenv, p, name, env, def, usage)
	return p
}

// envStringVar is envString into p.
func envStringVar(fs *flag.FlagSet, getenv func(string) string, p *string, name, env, def, usage string) {
	fs.StringVar(p, name, def, usage+" ($"+env+")")
	if v := getenv(env); v != "" {
		*p = v
	}
}

// validURLs reports whether each of urls parses. A PostgreSQL key=value
// connection string is no URL and is left to the driver.
func validURLs(urls []string) bool {
	for _, u := range urls {
		u = strings.TrimSpace(u)
		if !strings.Contains(u, "://") {
			continue
		}
		if _, err := url.Parse(u); err != nil {
			return false
		}
	}
	return true
}
