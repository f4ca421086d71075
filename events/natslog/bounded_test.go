package natslog

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A read the log never answers (its request lost as the connection went
// stale) is given up after its attempt and tried again, within retryFor:
// it held its caller until the caller's own deadline.
func TestBoundedReads(t *testing.T) {
	unanswered := func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() }
	for _, tc := range []struct {
		name    string
		answers []error // one per attempt, then unanswered
		want    error
		tries   int
	}{
		{"answered", []error{nil}, nil, 1},
		{"lost twice, then answered", []error{context.DeadlineExceeded, context.DeadlineExceeded, nil}, nil, 3},
		{"not there", []error{jetstream.ErrMsgNotFound}, jetstream.ErrMsgNotFound, 1},
		{"never answered", nil, context.DeadlineExceeded, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a request's
			defer cancel()
			tries := 0
			start := time.Now()
			_, err := bounded(ctx, 50*time.Millisecond, 500*time.Millisecond, func(ctx context.Context) (int, error) {
				tries++
				if tries > len(tc.answers) {
					return unanswered(ctx)
				}
				switch err := tc.answers[tries-1]; {
				case errors.Is(err, context.DeadlineExceeded):
					return unanswered(ctx) // lost: no answer within the attempt
				case err != nil:
					return 0, err
				}
				return 1, nil
			})
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if tc.tries > 0 && tries != tc.tries {
				t.Errorf("%d attempts, want %d", tries, tc.tries)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("took %v: held past retryFor", took)
			}
		})
	}
}
