package main

import (
	"context"
	"errors"
	"sync"
)

// group runs long-lived parts together: when the context ends or any part
// returns, every part is told to stop, and run waits for all of them.
//
// Parts added with addLast are told to stop only once every other part has
// returned: the projectors, which the requests still answered during a
// shutdown's grace wait for (a read for its read model, a send for its
// answer).
type group struct{ parts, last []func(context.Context) error }

func (g *group) add(part func(context.Context) error)     { g.parts = append(g.parts, part) }
func (g *group) addLast(part func(context.Context) error) { g.last = append(g.last, part) }

// run returns the first error of a part that stopped on its own; a part
// that returns nil before shutdown is treated as a failure too, since every
// part is meant to run until told otherwise. Such a failure stops every
// part at once, the last ones too. A part that fails to stop cleanly
// (the HTTP server's grace ran out) is reported too, unless a failure
// came first; being told to stop is no failure.
func (g *group) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lastCtx, cancelLast := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelLast()
	var (
		once  sync.Once
		first error
	)
	start := func(wg *sync.WaitGroup, ctx context.Context, part func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := part(ctx)
			switch {
			case ctx.Err() == nil:
				if err == nil {
					err = errors.New("a part of the service stopped unexpectedly")
				}
				once.Do(func() { first = err })
				cancelLast()
			case err != nil && !errors.Is(err, context.Canceled):
				once.Do(func() { first = err })
			}
			cancel()
		}()
	}
	var parts, last sync.WaitGroup
	for _, part := range g.last {
		start(&last, lastCtx, part)
	}
	for _, part := range g.parts {
		start(&parts, ctx, part)
	}
	parts.Wait()
	cancelLast()
	last.Wait()
	return first
}
