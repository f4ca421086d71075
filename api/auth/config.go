package auth

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

const (
	// MinSecretLen is the shortest HS256 secret accepted: HMAC-SHA256 is only
	// as strong as its key, and 32 bytes matches the hash size.
	MinSecretLen = 32
	// DefaultLeeway absorbs clock skew between the token issuer and us.
	DefaultLeeway = 30 * time.Second
	// DefaultJWKSRefreshInterval bounds how long a key the issuer has
	// withdrawn keeps verifying tokens here.
	DefaultJWKSRefreshInterval = 15 * time.Minute
	// DefaultJWKSTimeout bounds one JWKS fetch when HTTPClient has no timeout
	// of its own. An unknown-kid refresh runs inside a request, so it is short.
	DefaultJWKSTimeout = 5 * time.Second
	// unknownKIDRefreshEvery caps refreshes triggered by tokens with a kid we
	// do not hold: otherwise anyone could make us hammer the issuer by
	// sending made-up kids.
	unknownKIDRefreshEvery = time.Minute
	// maxJWKSBytes caps a JWKS response; real sets are a few KiB, and an
	// unbounded body would let a broken or hostile endpoint exhaust memory.
	maxJWKSBytes = 1 << 20
)

// Config says where verification keys come from and which tokens count.
type Config struct {
	// HS256Secret verifies HS256 tokens (development and simple
	// deployments). At least MinSecretLen bytes; may be empty when JWKSURL
	// is set.
	HS256Secret []byte
	// JWKSURL is fetched for RS256/384/512, ES256/384/512 and PS256 keys.
	// It must be https, except on a loopback host (local issuers, tests):
	// whoever can alter this response can mint tokens.
	JWKSURL string
	// JWKSRefreshInterval is how often the JWKS is fetched again in the
	// background. Zero means DefaultJWKSRefreshInterval.
	JWKSRefreshInterval time.Duration
	// Issuer, when set, must equal the token's iss.
	Issuer string
	// Audience, when set, must be among the token's aud values.
	Audience string
	// Leeway is the clock skew tolerated for exp, nbf and iat. Zero means
	// DefaultLeeway; a negative value means none at all.
	Leeway time.Duration
	// Now is the clock tokens are judged against; nil means time.Now.
	Now func() time.Time
	// HTTPClient fetches the JWKS; nil means a client with
	// DefaultJWKSTimeout. Its Timeout, when set, also bounds each fetch.
	HTTPClient *http.Client
	// Logger receives JWKS refresh failures and, at debug level, why tokens
	// were refused. Nil discards.
	Logger *slog.Logger
}

// Validate reports whether the configuration can verify anything at all.
// Errors wrap ErrInvalidConfig.
func (c Config) Validate() error {
	if len(c.HS256Secret) == 0 && c.JWKSURL == "" {
		return fmt.Errorf("%w: no key source: set HS256Secret or JWKSURL", ErrInvalidConfig)
	}
	if n := len(c.HS256Secret); n > 0 && n < MinSecretLen {
		return fmt.Errorf("%w: HS256Secret is %d bytes, need at least %d", ErrInvalidConfig, n, MinSecretLen)
	}
	if c.JWKSURL != "" {
		if err := checkJWKSURL(c.JWKSURL); err != nil {
			return fmt.Errorf("%w: JWKSURL: %w", ErrInvalidConfig, err)
		}
	}
	if c.JWKSRefreshInterval < 0 {
		return fmt.Errorf("%w: JWKSRefreshInterval is negative", ErrInvalidConfig)
	}
	return nil
}

func checkJWKSURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("parse: %w", err)
	}
	switch {
	case u.Host == "":
		return fmt.Errorf("no host in %q", raw)
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && isLoopback(u.Hostname()):
		return nil
	default:
		return fmt.Errorf("scheme %q not allowed: use https (http only for loopback hosts)", u.Scheme)
	}
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// leeway resolves the zero-means-default convention.
func (c Config) leeway() time.Duration {
	switch {
	case c.Leeway == 0:
		return DefaultLeeway
	case c.Leeway < 0:
		return 0
	default:
		return c.Leeway
	}
}
