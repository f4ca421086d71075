package main

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestGroupStopsTheLastPartsLast(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var g group
	lastStopped := make(chan struct{})
	g.addLast(func(ctx context.Context) error {
		<-ctx.Done()
		close(lastStopped)
		return nil
	})
	g.add(func(ctx context.Context) error {
		<-ctx.Done()
		// A request finishing in the grace still has the last parts. (An
		// error returned after ctx ended is no failure to run: say it here.)
		select {
		case <-lastStopped:
			t.Error("the last part stopped before the part that needs it")
		case <-time.After(50 * time.Millisecond):
		}
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- g.run(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	select {
	case <-lastStopped:
	default:
		t.Fatal("run returned before the last part stopped")
	}
}

func TestGroupFailureStopsEveryPart(t *testing.T) {
	boom := errors.New("boom")
	waitStop := func(ctx context.Context) error { <-ctx.Done(); return nil }
	for _, tc := range []struct {
		name        string
		parts, last []func(context.Context) error
	}{
		{"a part fails", []func(context.Context) error{waitStop, func(context.Context) error { return boom }}, []func(context.Context) error{waitStop}},
		{"a last part fails", []func(context.Context) error{waitStop}, []func(context.Context) error{waitStop, func(context.Context) error { return boom }}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := group{parts: tc.parts, last: tc.last}
			done := make(chan error, 1)
			go func() { done <- g.run(context.Background()) }()
			select {
			case err := <-done:
				if !errors.Is(err, boom) {
					t.Fatalf("run: %v, want %v", err, boom)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("run did not stop the other parts")
			}
		})
	}
}
