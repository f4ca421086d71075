package main

import (
	"strconv"
	"testing"
)

func TestRateLimit(t *testing.T) {
	s := startService(t, func(env map[string]string) {
		env["ASTRO_RATE_LIMIT"] = "1"
		env["ASTRO_RATE_BURST"] = "2"
	})
	alice := token(t, "alice", "w1")
	bob := token(t, "bob", "w1")
	for range 2 {
		s.call("GET", "/api/data/notifications/unreadcount", alice, nil).want(t, 200)
	}
	env := s.call("GET", "/api/data/notifications/unreadcount", alice, nil).want(t, 429)
	if env.StatusCode != "TooManyRequests" {
		t.Fatalf("statusCode %q", env.StatusCode)
	}
	if secs, err := strconv.Atoi(env.Header.Get("Retry-After")); err != nil || secs < 1 {
		t.Fatalf("Retry-After %q", env.Header.Get("Retry-After"))
	}
	s.call("GET", "/api/data/notifications/unreadcount", bob, nil).want(t, 200)
}
