package api

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// limiter is a token bucket per caller (workspace and user), so one noisy
// client slows down alone.
type limiter struct {
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

func newLimiter(perSecond float64, burst int, now func() time.Time) *limiter {
	return &limiter{rate: rate.Limit(perSecond), burst: burst, now: now, buckets: map[string]*bucket{}}
}

// allow takes a token for key, or says how long until one is free.
func (l *limiter) allow(key string) (bool, time.Duration) {
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

func (l *limiter) evict(now time.Time) {
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
