package api

import (
	"context"
	"testing"
	"time"
)

// TestSlotsPerWorkspace: one workspace holding all its slots waits, then is
// refused; another workspace is not held up by it; a freed slot is taken.
func TestSlotsPerWorkspace(t *testing.T) {
	s := newSlots(2, 50*time.Millisecond)
	ctx := context.Background()
	var held []func()
	for range 2 {
		release, ok := s.acquire(ctx, "busy")
		if !ok {
			t.Fatal("a free slot was refused")
		}
		held = append(held, release)
	}
	start := time.Now()
	if _, ok := s.acquire(ctx, "busy"); ok {
		t.Fatal("a third slot of a two-slot workspace was given")
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Fatalf("refused after %v, without waiting", waited)
	}
	other, ok := s.acquire(ctx, "quiet")
	if !ok {
		t.Fatal("another workspace was held up by a busy one")
	}
	other()
	got := make(chan bool)
	go func() {
		release, ok := s.acquire(ctx, "busy")
		if ok {
			release()
		}
		got <- ok
	}()
	held[0]()
	held[0]() // releasing twice frees one slot, not two
	if !<-got {
		t.Fatal("a freed slot was not taken by a waiter")
	}
	held[1]()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.inUse) != 0 {
		t.Fatalf("idle workspaces kept: %v", s.inUse)
	}
}
