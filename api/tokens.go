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
//
// It holds two generations: new entries go into the current one, a hit in
// the previous one moves there too, and when the current one is full it
// becomes the previous one and the old previous one is dropped whole. Every
// operation is O(1) whatever the number of callers, and the tokens in use
// stay while those seen once age out.
type tokenCache struct {
	mu        sync.Mutex
	size      int // entries a generation holds
	cur, prev map[string]tokenEntry
}

type tokenEntry struct {
	claims auth.Claims
	until  time.Time
}

const (
	tokenCacheSize = 8192 // a generation's: at most twice as many tokens in all
	tokenCacheTTL  = time.Minute
)

func newTokenCache(size int) *tokenCache {
	return &tokenCache{size: size, cur: make(map[string]tokenEntry, size)}
}

func (c *tokenCache) get(token string, now time.Time) (auth.Claims, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.cur[token]
	if !ok {
		if e, ok = c.prev[token]; ok {
			delete(c.prev, token)
			c.add(token, e)
		}
	}
	if !ok {
		return auth.Claims{}, false
	}
	if !now.Before(e.until) {
		delete(c.cur, token)
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
	c.add(token, tokenEntry{claims: claims, until: until})
}

func (c *tokenCache) add(token string, e tokenEntry) {
	if _, ok := c.cur[token]; !ok && len(c.cur) >= c.size {
		c.prev, c.cur = c.cur, make(map[string]tokenEntry, c.size)
	}
	c.cur[token] = e
}
