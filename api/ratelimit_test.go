package api

import (
	"errors"
	"strings"
	"testing"
	"time"

	"astro/commands"
)

func TestLimiter(t *testing.T) {
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	l := NewRateLimiter(2, 3, func() time.Time { return now })
	for i := range 3 {
		if ok, _ := l.allow("w/a"); !ok {
			t.Fatalf("request %d of the burst refused", i+1)
		}
	}
	ok, wait := l.allow("w/a")
	if ok || wait <= 0 || wait > 500*time.Millisecond {
		t.Fatalf("over the burst: ok=%v wait=%v, want refused for up to 0.5 s", ok, wait)
	}
	if ok, _ := l.allow("w/b"); !ok {
		t.Fatal("another caller was limited by the first one's requests")
	}
	now = now.Add(500 * time.Millisecond)
	if ok, _ := l.allow("w/a"); !ok {
		t.Fatal("not allowed again after the bucket refilled one token")
	}
	if got := retryAfter(1500 * time.Millisecond); got != 2 {
		t.Fatalf("Retry-After for 1.5 s: %d", got)
	}
	if got := retryAfter(time.Millisecond); got != 1 {
		t.Fatalf("Retry-After for 1 ms: %d", got)
	}
}

func TestLimiterForgetsIdleCallers(t *testing.T) {
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	l := NewRateLimiter(100, 100, func() time.Time { return now })
	for i := range maxIdleBuckets {
		l.allow(string(rune(i)))
	}
	now = now.Add(time.Hour)
	l.allow("new")
	if len(l.buckets) != 1 {
		t.Fatalf("%d buckets kept after an hour idle, want 1", len(l.buckets))
	}
}

func TestRateLimiterTake(t *testing.T) {
	if retry, err := (*RateLimiter)(nil).Take("w", "a"); retry != 0 || err != nil {
		t.Fatalf("no limiter: retry %d, %v", retry, err)
	}
	if l := NewRateLimiter(0, 5, nil); l != nil {
		t.Fatal("a rate of 0 built a limiter")
	}
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	l := NewRateLimiter(0.5, 1, func() time.Time { return now })
	if _, err := l.Take("w", "a"); err != nil {
		t.Fatalf("first request: %v", err)
	}
	retry, err := l.Take("w", "a")
	var e *commands.Error
	if !errors.As(err, &e) || e.Code != commands.ETooManyRequests || retry != 2 || !strings.Contains(e.Message, "retry after 2 s") {
		t.Fatalf("over the budget: retry %d, %v", retry, err)
	}
	// The key is workspace and user: neither alone shares a bucket.
	for _, c := range [][2]string{{"w", "b"}, {"v", "a"}} {
		if _, err := l.Take(c[0], c[1]); err != nil {
			t.Fatalf("%s/%s limited by w/a: %v", c[0], c[1], err)
		}
	}
}
