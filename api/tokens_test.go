package api

import (
	"fmt"
	"testing"
	"time"

	"astro/api/auth"
)

// TestTokenCache: a verified token is remembered until it expires or for
// the cache's TTL; the cache holds at most two generations; a token in use
// stays while tokens seen once pass through.
func TestTokenCache(t *testing.T) {
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	c := newTokenCache(4)
	c.put("a", auth.Claims{UserID: "alice"}, now)
	if cl, ok := c.get("a", now); !ok || cl.UserID != "alice" {
		t.Fatalf("get a: %+v %v", cl, ok)
	}
	if _, ok := c.get("a", now.Add(tokenCacheTTL)); ok {
		t.Fatal("a token is served past the cache's TTL")
	}
	c.put("e", auth.Claims{UserID: "eve", ExpiresAt: now.Add(time.Second)}, now)
	if _, ok := c.get("e", now.Add(time.Second)); ok {
		t.Fatal("a token is served past its expiry")
	}

	c.put("hot", auth.Claims{UserID: "hot"}, now)
	for i := range 100 {
		c.put(fmt.Sprint("once-", i), auth.Claims{}, now)
		if _, ok := c.get("hot", now); !ok {
			t.Fatalf("the token in use was dropped after %d others", i+1)
		}
		if n := len(c.cur) + len(c.prev); n > 2*c.size {
			t.Fatalf("%d entries, more than two generations of %d", n, c.size)
		}
	}
	if _, ok := c.get("once-0", now); ok {
		t.Fatal("a token seen once, 99 tokens ago, is still held by a cache of 8")
	}
}

// BenchmarkTokenCache: a put and a get of a token the cache does not hold,
// with tokens of 20,000 callers in turn: the cost must not grow with the
// number of callers.
func BenchmarkTokenCache(b *testing.B) {
	for _, callers := range []int{1000, 20000} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			c := newTokenCache(tokenCacheSize)
			tokens := make([]string, callers)
			for i := range tokens {
				tokens[i] = fmt.Sprintf("token-%06d", i)
			}
			now := time.Now()
			b.ResetTimer()
			for i := range b.N {
				tok := tokens[i%callers]
				if _, ok := c.get(tok, now); !ok {
					c.put(tok, auth.Claims{}, now)
				}
			}
		})
	}
}
