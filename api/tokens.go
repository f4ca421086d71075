package api

import (
	"sync"
	"time"

	"astro/api/auth"
)

// tokenCache remembers tokens that verified, so that a client's next
// requests skip the signature check and the JSON decoding of the claims
// (tens of microseconds, a tenth of a small request). An entry lives until
// the token expires or for a minute, whichever is sooner, so a key taken
// out of a JWKS stops being honoured within a minute.
type tokenCache struct {
	mu      sync.Mutex
	entries map[string]tokenEntry
}

type tokenEntry struct {
	claims auth.Claims
	until  time.Time
}

const (
	tokenCacheSize = 8192
	tokenCacheTTL  = time.Minute
)

func newTokenCache() *tokenCache { return &tokenCache{entries: map[string]tokenEntry{}} }

func (c *tokenCache) get(token string, now time.Time) (auth.Claims, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[token]
	if !ok {
		return auth.Claims{}, false
	}
	if !now.Before(e.until) {
		delete(c.entries, token)
		return auth.Claims{}, false
	}
	return e.claims, true
}

func (c *tokenCache) put(token string, claims auth.Claims, now time.Time) {
	until := now.Add(tokenCacheTTL)
	if !claims.ExpiresAt.IsZero() && claims.ExpiresAt.Before(until) {
		until = claims.ExpiresAt
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= tokenCacheSize {
		// Full: drop expired entries, else any one. Which one goes hardly
		// matters; it costs its token one verification.
		for k, e := range c.entries {
			if !now.Before(e.until) {
				delete(c.entries, k)
			}
		}
		for k := range c.entries {
			if len(c.entries) < tokenCacheSize {
				break
			}
			delete(c.entries, k)
		}
	}
	c.entries[token] = tokenEntry{claims: claims, until: until}
}
