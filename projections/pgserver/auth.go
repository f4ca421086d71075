package pgserver

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"astro/projections/pgconn"
)

// passwordFile holds the role's password, in the cluster directory, 0600 to
// whoever runs Astro: the server listens on loopback, where every local
// user and process can reach it.
const passwordFile = "astro.password"

// hba is the cluster's pg_hba.conf: the role "astro" with its password,
// over loopback (unix sockets are off), and nothing else.
const hba = `# Written by Astro (projections/pgserver): only the role "astro", with the
# password in astro.password, over loopback. Rewritten at each start.
host all astro 127.0.0.1/32 scram-sha-256
host all astro ::1/128 scram-sha-256
`

// password returns the cluster's password, making it on first use (a
// cluster an older Astro initialised without one).
func password(dir string) (string, error) { return keepPassword(dir, newPassword()) }

// newPassword is a random password; hex, so that SQL needs no quoting.
func newPassword() string {
	raw := make([]byte, 24)
	_, _ = rand.Read(raw)
	return hex.EncodeToString(raw)
}

// keepPassword returns the cluster's password, keeping pw as it when the
// cluster has none yet. Created exclusively, so two programs starting on
// one cluster agree.
func keepPassword(dir, pw string) (string, error) {
	path := filepath.Join(dir, passwordFile)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case err == nil:
		_, err = f.WriteString(pw + "\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return "", fmt.Errorf("pgserver: keep the password: %w", err)
		}
	case !errors.Is(err, os.ErrExist):
		return "", fmt.Errorf("pgserver: keep the password: %w", err)
	}
	for range 50 { // another start may be writing it
		if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= 32 {
			return strings.TrimSpace(string(b)), nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return "", fmt.Errorf("pgserver: %s holds no password; remove it and pg_hba.conf's Astro lines to start over", path)
}

// secure makes the running server take only the role astro, with its
// password. A cluster an older Astro left trusts every local connection as
// superuser: the password is set first (a connection now still gets in
// either way), then pg_hba.conf is written and the server reloads it. A new
// cluster asks for the password from initdb on (see ensureCluster); here
// it only loses initdb's lines for other roles.
func (s *Server) secure(ctx context.Context, pw string, cred *syscall.Credential) error {
	path := filepath.Join(s.dir, "pg_hba.conf")
	if b, err := os.ReadFile(path); err == nil && string(b) == hba {
		return nil
	}
	connector, err := pgconn.NewConnector(s.url)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	// A hex password needs no quoting, and ALTER ROLE takes no parameters.
	if _, err := db.ExecContext(ctx, `ALTER ROLE astro PASSWORD '`+pw+`'`); err != nil {
		return fmt.Errorf("pgserver: set the password: %w", err)
	}
	if err := os.WriteFile(path, []byte(hba), 0o600); err != nil {
		return fmt.Errorf("pgserver: write pg_hba.conf: %w", err)
	}
	if cred != nil {
		if err := os.Chown(path, int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("pgserver: %w", err)
		}
	}
	if _, err := db.ExecContext(ctx, `SELECT pg_reload_conf()`); err != nil {
		return fmt.Errorf("pgserver: reload pg_hba.conf: %w", err)
	}
	s.logger.Info("postgres now asks for the password", "file", filepath.Join(s.dir, passwordFile))
	return nil
}
