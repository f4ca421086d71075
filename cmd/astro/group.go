package main

import (
	"context"
	"errors"
	"sync"
)

// group runs long-lived parts together: when the context ends or any part
// returns, every part is told to stop, and run waits for all of them.
type group struct{ parts []func(context.Context) error }

func (g *group) add(part func(context.Context) error) { g.parts = append(g.parts, part) }

// run returns the first error of a part that stopped on its own; a part
// that returns nil before shutdown is treated as a failure too, since every
// part is meant to run until told otherwise.
func (g *group) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for _, part := range g.parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := part(ctx)
			if ctx.Err() == nil {
				if err == nil {
					err = errors.New("a part of the service stopped unexpectedly")
				}
				once.Do(func() { first = err })
			}
			cancel()
		}()
	}
	wg.Wait()
	return first
}
