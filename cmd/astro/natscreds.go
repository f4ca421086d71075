package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"astro/events/natsserver"
	"astro/projections"
)

// Files of the embedded NATS server's credentials in the data directory.
const (
	// natsPasswordsFile holds a generated password per user; only its
	// owner may read it, as with the development JWT secret.
	natsPasswordsFile = "nats-passwords.json"
	// natsURLFile holds the TCP address of the running service's embedded
	// server, so that tools and `astro nats-credentials` find it whatever
	// port it got.
	natsURLFile = "nats-url"
)

// protectedConsumers are Astro's own durable consumers on the event
// stream (projections.Runner names them "projector_" + projector), which
// no downstream consumer may touch.
func protectedConsumers() []string {
	names := projections.Names()
	out := make([]string, len(names))
	for i, p := range names {
		out[i] = "projector_" + p
	}
	return out
}

// keptNATSPasswords reads the passwords kept in path (fs.ErrNotExist when
// there is none), waiting a moment for a file another process has just
// created to be written: read at once, it is empty, and "damaged" would
// send the operator to delete credentials in use.
func keptNATSPasswords(path string) (natsserver.Passwords, error) {
	var p natsserver.Passwords
	_, err := readWritten(path, func(b []byte) bool {
		p = natsserver.Passwords{}
		return json.Unmarshal(b, &p) == nil && p.Astro != "" && p.Consumer != "" && p.Service != ""
	})
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return natsserver.Passwords{}, err
	case errors.Is(err, errIncomplete):
		return natsserver.Passwords{}, fmt.Errorf("%s is damaged; delete it to generate new NATS credentials", path)
	case err != nil:
		return natsserver.Passwords{}, fmt.Errorf("read NATS credentials: %w", err)
	}
	return p, nil
}

// natsPasswords returns the embedded server's passwords, generated into the
// data directory on first use.
func natsPasswords(dataDir string) (natsserver.Passwords, error) {
	path := filepath.Join(dataDir, natsPasswordsFile)
	if p, err := keptNATSPasswords(path); !errors.Is(err, fs.ErrNotExist) {
		return p, err
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return natsserver.Passwords{}, err
	}
	p := natsserver.Passwords{Astro: newPassword(), Consumer: newPassword(), Service: newPassword()}
	b, _ := json.MarshalIndent(p, "", "  ") // plain strings always encode
	// O_EXCL: when two processes start at once, one writes and the other
	// reads what it wrote.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return keptNATSPasswords(path)
	}
	if err != nil {
		return natsserver.Passwords{}, fmt.Errorf("keep NATS credentials: %w", err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return natsserver.Passwords{}, fmt.Errorf("keep NATS credentials: %w", err)
	}
	if err := f.Close(); err != nil {
		return natsserver.Passwords{}, fmt.Errorf("keep NATS credentials: %w", err)
	}
	return p, nil
}

// newPassword is 128 random bits in hex: safe in a URL as it is.
func newPassword() string {
	raw := make([]byte, 16)
	_, _ = rand.Read(raw)
	return hex.EncodeToString(raw)
}

func (c natsCredentials) password(p natsserver.Passwords) string {
	switch c.User {
	case natsserver.UserAstro:
		return p.Astro
	case natsserver.UserConsumer:
		return p.Consumer
	case natsserver.UserService:
		return p.Service
	}
	return ""
}

// natsCredentials is what a client of the embedded server needs.
type natsCredentials struct {
	User, Password, URL string
}

// withUser is URL with the user and password in it, which nats.go and the
// nats CLI accept as they are.
func (c natsCredentials) withUser() string {
	u, err := url.Parse(c.URL)
	if err != nil {
		return c.URL
	}
	u.User = url.UserPassword(c.User, c.Password)
	return u.String()
}

// embeddedURL is the address of the embedded server: the one the running
// service wrote, else the one it would listen on.
func embeddedURL(dataDir, listen string) (string, error) {
	if b, err := os.ReadFile(filepath.Join(dataDir, natsURLFile)); err == nil {
		if u := strings.TrimSpace(string(b)); u != "" {
			return u, nil
		}
	}
	if listen == "" || listen == "off" {
		return "", errors.New("the embedded NATS server accepts no TCP clients (ASTRO_NATS_LISTEN=off)")
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("nats-listen %q: %w", listen, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "nats://" + net.JoinHostPort(host, port), nil
}

// runNATSCredentials is `astro nats-credentials --role consumer|service`.
func runNATSCredentials(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("astro nats-credentials", flag.ContinueOnError)
	fs.SetOutput(stderr)
	role := fs.String("role", "", "consumer (reads events, runs its own durable consumers) or service (sends commands)")
	urlOnly := fs.Bool("url", false, "print only the URL with the user and password in it")
	dataDir := envString(fs, getenv, "data-dir", "ASTRO_DATA_DIR", defaultOf("data-dir"), "data directory holding the generated credentials")
	listen := envString(fs, getenv, "nats-listen", "ASTRO_NATS_LISTEN", defaultOf("nats-listen"), "the embedded server's address, when the service is not running")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: astro nats-credentials --role consumer|service [--url]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *role != natsserver.UserConsumer && *role != natsserver.UserService {
		fs.Usage()
		return fmt.Errorf("nats-credentials: --role must be %s or %s", natsserver.UserConsumer, natsserver.UserService)
	}
	if getenv("ASTRO_NATS_URL") != "" {
		return errors.New("nats-credentials: with an external NATS (ASTRO_NATS_URL) the credentials are that server's (see deploy/nats-server.conf), not Astro's to print")
	}
	passwords, err := natsPasswords(*dataDir)
	if err != nil {
		return err
	}
	u, err := embeddedURL(*dataDir, *listen)
	if err != nil {
		return err
	}
	c := natsCredentials{User: *role, URL: u}
	c.Password = c.password(passwords)
	if *urlOnly {
		fmt.Fprintln(stdout, c.withUser())
		return nil
	}
	fmt.Fprintf(stdout, "user: %s\npassword: %s\nurl: %s\ninbox prefix: %s\nurl with credentials: %s\n",
		c.User, c.Password, c.URL, natsserver.InboxPrefix(c.User), c.withUser())
	return nil
}

// natsClient says how a tool reaches the log: a server (its URL may carry
// a user and password) with optional credentials, else the data directory.
type natsClient struct {
	URL, User, Password, Creds string
	DataDir                    string
	// Role is the embedded server's user a tool connects as when it finds
	// the service through the data directory: the least it needs.
	Role string
	// ServiceOnly: the tool runs until interrupted, so it must not open
	// the store itself when no service runs; it would hold the data
	// directory, and the service could not start on it.
	ServiceOnly bool
}

// addFlags declares the connection flags of a tool.
func (c *natsClient) addFlags(fs *flag.FlagSet, getenv func(string) string) {
	envStringVar(fs, getenv, &c.URL, "nats-url", "ASTRO_NATS_URL", "", "NATS server, may hold user:password@; default: the running service's, else its data directory")
	envStringVar(fs, getenv, &c.User, "nats-user", "ASTRO_NATS_USER", "", "NATS user")
	envStringVar(fs, getenv, &c.Password, "nats-password", "ASTRO_NATS_PASSWORD", "", "NATS password")
	envStringVar(fs, getenv, &c.Creds, "nats-creds", "ASTRO_NATS_CREDS", "", "NATS credentials file")
	envStringVar(fs, getenv, &c.DataDir, "data-dir", "ASTRO_DATA_DIR", defaultOf("data-dir"), "data directory of the embedded log")
}

// clientOptions are the options of a connection as user: its inbox prefix
// when it is one of the restricted users, who receive replies only there.
func clientOptions(user string) []nats.Option {
	if user == natsserver.UserConsumer || user == natsserver.UserService {
		return []nats.Option{nats.CustomInboxPrefix(natsserver.InboxPrefix(user))}
	}
	return nil
}

// connect connects to the log: the given server; else the running
// service's embedded server as c.Role; else, when no service runs on the
// data directory, its store in-process.
func (c natsClient) connect(ctx context.Context) (*nats.Conn, func(), error) {
	if c.URL != "" {
		user := c.User
		var opts []nats.Option
		if u, err := url.Parse(c.URL); err == nil && u.User != nil && user == "" {
			user = u.User.Username()
		}
		if c.User != "" {
			opts = append(opts, nats.UserInfo(c.User, c.Password))
		}
		if c.Creds != "" {
			opts = append(opts, nats.UserCredentials(c.Creds))
		}
		nc, err := nats.Connect(c.URL, append(opts, clientOptions(user)...)...)
		if err != nil {
			return nil, nil, fmt.Errorf("connect to %s: %w", redactURL(c.URL), err)
		}
		return nc, nc.Close, nil
	}
	passwords, err := natsPasswords(c.DataDir)
	if err != nil {
		return nil, nil, err
	}
	release, err := lockDataDir(c.DataDir)
	if err != nil {
		// The service runs: ask its server.
		u, uerr := embeddedURL(c.DataDir, "")
		if uerr != nil {
			return nil, nil, fmt.Errorf("%w, and its NATS server accepts no clients: set --nats-url", err)
		}
		cred := natsCredentials{User: c.Role, URL: u}
		cred.Password = cred.password(passwords)
		nc, err := nats.Connect(u, append([]nats.Option{nats.UserInfo(cred.User, cred.Password), nats.Timeout(5 * time.Second)}, clientOptions(cred.User)...)...)
		if err != nil {
			return nil, nil, fmt.Errorf("connect to the running service's NATS at %s: %w", u, err)
		}
		return nc, nc.Close, nil
	}
	if c.ServiceOnly {
		release()
		return nil, nil, fmt.Errorf("no service runs on %s: start it, or give --nats-url (opened here, the log would stay locked against the service, and nothing would write to it)", c.DataDir)
	}
	// Nobody runs on the data directory, and the lock keeps it so while
	// the tool reads the store.
	srv, err := natsserver.Start(ctx, natsserver.Config{StoreDir: filepath.Join(c.DataDir, "nats"), Listen: "off",
		Passwords: passwords, ProtectedConsumers: protectedConsumers()})
	if err != nil {
		release()
		return nil, nil, fmt.Errorf("open the log in %s: %w", c.DataDir, err)
	}
	nc, err := srv.Connect()
	if err != nil {
		srv.Shutdown()
		release()
		return nil, nil, err
	}
	return nc, func() { nc.Close(); srv.Shutdown(); release() }, nil
}

// redactURL hides a password in a URL that goes into an error message.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the NATS server"
	}
	return u.Redacted()
}
