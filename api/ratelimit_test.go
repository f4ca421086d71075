package api

import (
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newLimiter(2, 3, func() time.Time { return now })
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
	l := newLimiter(100, 100, func() time.Time { return now })
	for i := range maxIdleBuckets {
		l.allow(string(rune(i)))
	}
	now = now.Add(time.Hour)
	l.allow("new")
	if len(l.buckets) != 1 {
		t.Fatalf("%d buckets kept after an hour idle, want 1", len(l.buckets))
	}
}
