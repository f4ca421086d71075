package auth

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/MicahParks/keyfunc/v3"
	"golang.org/x/time/rate"
)

// newJWKS fetches cfg.JWKSURL once and keeps it fresh until ctx ends:
// every JWKSRefreshInterval, and on a token whose kid is not in the set
// (the issuer rotated keys) at most once per unknownKIDRefreshEvery.
// A refresh replaces the whole set, so withdrawn keys stop verifying.
func newJWKS(ctx context.Context, cfg Config, log *slog.Logger) (keyfunc.Keyfunc, error) {
	hc := &http.Client{}
	if cfg.HTTPClient != nil {
		c := *cfg.HTTPClient // our transport wrapper must not leak into the caller's client
		hc = &c
	}
	if hc.Timeout <= 0 {
		hc.Timeout = DefaultJWKSTimeout
	}
	hc.Transport = limitBody{base: hc.Transport, max: maxJWKSBytes}

	interval := cfg.JWKSRefreshInterval
	if interval == 0 {
		interval = DefaultJWKSRefreshInterval
	}

	// The refresh goroutine starts before the first fetch; if that fetch
	// fails we return an error, and the goroutine must not outlive it.
	ctx, cancel := context.WithCancel(ctx)
	failOnFirstFetch := false
	kf, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{cfg.JWKSURL}, keyfunc.Override{
		Client:                    hc,
		HTTPTimeout:               hc.Timeout,
		NoErrorReturnFirstHTTPReq: &failOnFirstFetch,
		// Bounds both the wait for the limiter and the refresh itself on the
		// request path. A wait longer than this fails at once instead of
		// holding the request, so made-up kids cost a map lookup, not a stall.
		RateLimitWaitMax: hc.Timeout,
		RefreshErrorHandlerFunc: func(u string) func(context.Context, error) {
			return func(ctx context.Context, err error) {
				log.WarnContext(ctx, "auth: JWKS refresh failed", "url", u, "err", err)
			}
		},
		RefreshInterval:   interval,
		RefreshUnknownKID: rate.NewLimiter(rate.Every(unknownKIDRefreshEvery), 1),
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("auth: load JWKS from %s: %w", cfg.JWKSURL, err)
	}
	// cancel is deliberately not called on success: the caller's ctx, not
	// this function, decides how long the refresh goroutine lives.
	_ = cancel
	return kf, nil
}

// limitBody caps JWKS response bodies; the library decodes whatever it is
// given.
type limitBody struct {
	base http.RoundTripper
	max  int64
}

func (t limitBody) RoundTrip(r *http.Request) (*http.Response, error) {
	base := t.base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = http.MaxBytesReader(nil, resp.Body, t.max)
	return resp, nil
}
