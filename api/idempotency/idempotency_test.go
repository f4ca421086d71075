package idempotency

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"astro/events/natstest"
)

// TestBucketIsBounded: records are bounded by MaxBytes; past it, a new key
// is refused with ErrFull (nothing executes under it), keys already
// recorded still replay, and a claim whose answer finds no room gives the
// key up instead of holding it.
func TestBucketIsBounded(t *testing.T) {
	js, err := jetstream.New(natstest.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := Open(ctx, js, Config{Bucket: "IDEM_BOUNDED", MaxBytes: 64 << 10, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	answer := make([]byte, 2<<10)
	var recorded []string
	var fullErr error
	for i := 0; i < 1000 && fullErr == nil; i++ {
		key := fmt.Sprintf("k%d", i)
		claim, replay, err := s.Begin(ctx, key, "req")
		if err != nil {
			fullErr = err
			break
		}
		if replay != nil {
			t.Fatalf("%s: replay of a new key", key)
		}
		if err := claim.Finish(ctx, 200, answer); err != nil {
			fullErr = err
			if _, _, err := s.Begin(ctx, key, "req"); !errors.Is(err, ErrFull) {
				// The key was given up, so it is claimable again (or the
				// bucket is full for the new claim as well).
				if err != nil {
					t.Fatalf("%s after a Finish without room: %v", key, err)
				}
			}
			break
		}
		recorded = append(recorded, key)
	}
	if !errors.Is(fullErr, ErrFull) {
		t.Fatalf("64 KiB took %d records of 2 KiB without ErrFull (last error %v)", len(recorded), fullErr)
	}
	if len(recorded) == 0 || len(recorded) > 32 {
		t.Fatalf("%d records of 2 KiB fit in 64 KiB", len(recorded))
	}
	// Claims are smaller than answers: a few more may fit, then none.
	for i := 0; ; i++ {
		_, _, err := s.Begin(ctx, fmt.Sprintf("claim%d", i), "req")
		if errors.Is(err, ErrFull) {
			break
		}
		if err != nil || i == 100 {
			t.Fatalf("claim %d on a full bucket: %v, want ErrFull within 100", i, err)
		}
	}
	_, replay, err := s.Begin(ctx, recorded[0], "req")
	if err != nil || replay == nil || replay.Status != 200 {
		t.Fatalf("a recorded key on a full bucket: replay %+v, err %v", replay, err)
	}
	if _, _, err := s.Begin(ctx, recorded[0], "other"); !errors.Is(err, ErrMismatch) {
		t.Fatalf("a recorded key with another request: %v, want ErrMismatch", err)
	}
}

// TestUnansweredKeepsTheKeyToItsRequest: after a failure that may have
// left the write done (a 5xx), the same request executes again, and another
// request under the key is refused: it used to be released, and a second
// request then ran under the first's key (and its derived ids), answering
// with its own content what the first had stored.
func TestUnansweredKeepsTheKeyToItsRequest(t *testing.T) {
	js, err := jetstream.New(natstest.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := Open(ctx, js, Config{Bucket: "IDEM_UNANSWERED"})
	if err != nil {
		t.Fatal(err)
	}
	claim, _, err := s.Begin(ctx, "k", "first")
	if err != nil {
		t.Fatal(err)
	}
	if err := claim.Unanswered(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Begin(ctx, "k", "second"); !errors.Is(err, ErrMismatch) {
		t.Fatalf("another request after an unanswered one: %v, want ErrMismatch", err)
	}
	again, replay, err := s.Begin(ctx, "k", "first")
	if err != nil || replay != nil || again == nil {
		t.Fatalf("the same request after an unanswered one: claim %v, replay %+v, err %v; want a claim", again, replay, err)
	}
	if err := again.Finish(ctx, 200, []byte(`{"ok":true}`)); err != nil {
		t.Fatal(err)
	}
	if _, replay, err := s.Begin(ctx, "k", "first"); err != nil || replay == nil || string(replay.Body) != `{"ok":true}` {
		t.Fatalf("after the retry answered: replay %+v, err %v", replay, err)
	}
}
