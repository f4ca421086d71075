package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"astro/api/auth"
)

// runToken prints a development token signed with the service's HS256
// secret (the configured one, or the data directory's), with the issuer
// and audience the service requires, when it requires them.
func runToken(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("astro token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	user := fs.String("user", "", "user id (sub)")
	ws := fs.String("workspace", "", "workspace id (workspace_id)")
	scope := fs.String("scope", "", `space-separated privileges, e.g. "notifications:send resources:write"`)
	ttl := fs.Duration("ttl", 24*time.Hour, "lifetime")
	dataDir := envString(fs, getenv, "data-dir", "ASTRO_DATA_DIR", defaultOf("data-dir"), "data directory holding the development secret")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *user == "" || *ws == "" {
		fs.Usage()
		return errors.New("token: --user and --workspace are required")
	}
	// Trimmed as the service trims it: a secret from a file or a
	// Kubernetes secret often ends in a newline.
	secret, err := jwtSecret(strings.TrimSpace(getenv("ASTRO_JWT_SECRET")), strings.TrimSpace(getenv("ASTRO_JWKS_URL")), *dataDir)
	if err != nil {
		return err
	}
	if secret == nil {
		// The service takes only its identity provider's tokens then: a
		// token signed with a secret of the data directory would be 401.
		return errors.New("token: ASTRO_JWKS_URL is set and ASTRO_JWT_SECRET is not: the service takes only the identity provider's tokens")
	}
	claims := auth.Claims{UserID: *user, WorkspaceID: *ws, Scopes: strings.Fields(*scope), Issuer: strings.TrimSpace(getenv("ASTRO_JWT_ISSUER"))}
	if aud := strings.TrimSpace(getenv("ASTRO_JWT_AUDIENCE")); aud != "" {
		claims.Audience = []string{aud}
	}
	tok, err := auth.Sign(secret, claims, time.Now(), *ttl)
	if err != nil {
		return fmt.Errorf("token: %w", err)
	}
	fmt.Fprintln(stdout, tok)
	return nil
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
