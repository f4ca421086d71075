package api

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"astro/commands"
)

// RateLimiter is a token bucket per caller (workspace and user), so one
// noisy client slows down alone. One instance serves every transport
// (HTTP and NATS commands): a caller's budget is one, however it comes in.
type RateLimiter struct {
	rate  rate.Limit
	burst int
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	l    *rate.Limiter
	seen time.Time
}

// maxIdleBuckets bounds the memory of callers seen once: past it, buckets
// idle long enough to be full again are dropped.
const maxIdleBuckets = 10000

// NewRateLimiter allows each caller perSecond requests a second, with
// bursts of burst (at least 1); now defaults to time.Now. With perSecond 0
// it returns nil, which limits nothing.
func NewRateLimiter(perSecond float64, burst int, now func() time.Time) *RateLimiter {
	if perSecond <= 0 {
		return nil
	}
	if now == nil {
		now = time.Now
	}
	return &RateLimiter{rate: rate.Limit(perSecond), burst: max(burst, 1), now: now, buckets: map[string]*bucket{}}
}

// Take spends one of the requests of the caller workspaceID/userID. Over
// its budget, it returns the 429 to answer, its message saying when to
// retry, and the same wait in whole seconds for a Retry-After.
func (l *RateLimiter) Take(workspaceID, userID string) (retry int, err error) {
	if l == nil {
		return 0, nil
	}
	if ok, wait := l.allow(workspaceID + "/" + userID); !ok {
		retry = retryAfter(wait)
		return retry, commands.Errorf(commands.ETooManyRequests, "Too many requests; retry after %d s.", retry)
	}
	return 0, nil
}

// allow takes a token for key, or says how long until one is free.
func (l *RateLimiter) allow(key string) (bool, time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[key]
	if !ok {
		if len(l.buckets) >= maxIdleBuckets {
			l.evict(now)
		}
		b = &bucket{l: rate.NewLimiter(l.rate, l.burst)}
		l.buckets[key] = b
	}
	b.seen = now
	r := b.l.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

func (l *RateLimiter) evict(now time.Time) {
	full := time.Duration(float64(l.burst)/float64(l.rate)*float64(time.Second)) + time.Second
	for k, b := range l.buckets {
		if now.Sub(b.seen) > full {
			delete(l.buckets, k)
		}
	}
}

// retryAfter is the Retry-After header value: whole seconds, at least 1.
func retryAfter(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}
