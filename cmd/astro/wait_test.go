package main

import (
	"testing"
	"time"
)

// waitFor polls cond until it returns nil, and fails the test with cond's
// last error once timeout has passed: what a test waits for (a read model,
// a probe, a recovery) comes in its own time, and the deadline is what
// turns "never" into a failure.
func waitFor(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond) // polling, bounded by the deadline
	}
}
