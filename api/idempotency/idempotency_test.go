package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
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
		if err := claim.Finish(ctx, 200, answer, 0); err != nil {
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
	if claim.Again() {
		t.Fatal("a first claim says its request ran before")
	}
	again, replay, err := s.Begin(ctx, "k", "first")
	if err != nil || replay != nil || again == nil || !again.Again() {
		t.Fatalf("the same request after an unanswered one: claim %+v, replay %+v, err %v; want a claim that says it runs again", again, replay, err)
	}
	if err := again.Finish(ctx, 200, []byte(`{"ok":true}`), 0); err != nil {
		t.Fatal(err)
	}
	if _, replay, err := s.Begin(ctx, "k", "first"); err != nil || replay == nil || string(replay.Body) != `{"ok":true}` {
		t.Fatalf("after the retry answered: replay %+v, err %v", replay, err)
	}
}

// open opens a store on a bucket of its own, on the test's JetStream.
func open(t *testing.T, cfg Config) *Store {
	t.Helper()
	js, err := jetstream.New(natstest.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Bucket == "" {
		cfg.Bucket = "IDEM_" + strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	}
	s, err := Open(t.Context(), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// clock is a time the test moves by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// TestClaims: a fresh claim holds its key's retries (ErrInProgress when
// the retry gives up waiting); a claim older than ClaimTimeout is a dead
// process's and is taken over, after which the dead claim can no longer
// record its answer; a recorded answer replays.
func TestClaims(t *testing.T) {
	clk := &clock{now: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := open(t, Config{ClaimTimeout: 15 * time.Second, Now: clk.Now})
	ctx := t.Context()

	dead, replay, err := s.Begin(ctx, "k", "req")
	if err != nil || dead == nil || replay != nil {
		t.Fatalf("first Begin: claim %v, replay %v, err %v", dead, replay, err)
	}
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, _, err := s.Begin(short, "k", "req"); !errors.Is(err, ErrInProgress) {
		t.Fatalf("retry during a fresh claim: %v, want ErrInProgress", err)
	}
	if _, _, err := s.Begin(ctx, "k", "other"); !errors.Is(err, ErrMismatch) {
		t.Fatalf("another request during a claim: %v, want ErrMismatch", err)
	}

	clk.add(16 * time.Second)
	taker, replay, err := s.Begin(ctx, "k", "req")
	if err != nil || taker == nil || replay != nil || dead.Again() || !taker.Again() {
		t.Fatalf("Begin after the claim went stale: claim %+v, replay %v, err %v; want a claim that says it runs again", taker, replay, err)
	}
	if err := dead.Finish(ctx, 200, []byte("dead"), 0); err == nil {
		t.Fatal("the abandoned claim recorded its answer over the takeover")
	}
	if err := taker.Finish(ctx, 201, []byte("live"), 0); err != nil {
		t.Fatal(err)
	}
	_, replay, err = s.Begin(ctx, "k", "req")
	if err != nil || replay == nil || replay.Status != 201 || string(replay.Body) != "live" {
		t.Fatalf("replay: %+v, err %v", replay, err)
	}

	// A released key is free for any request.
	rel, _, err := s.Begin(ctx, "r", "req")
	if err != nil {
		t.Fatal(err)
	}
	if err := rel.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if c, replay, err := s.Begin(ctx, "r", "other"); err != nil || c == nil || replay != nil {
		t.Fatalf("Begin on a released key: claim %v, replay %v, err %v", c, replay, err)
	}
}

// TestClaimTimeoutExceedsMaxWrite: a store whose claims go stale while a
// write under them may still run is refused, before any bucket is made:
// its takeovers would execute a live request a second time.
func TestClaimTimeoutExceedsMaxWrite(t *testing.T) {
	js, err := jetstream.New(natstest.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		timeout time.Duration
		taken   bool
	}{
		{"default", 0, true},
		{"just past MaxWrite", MaxWrite + time.Millisecond, true},
		{"MaxWrite", MaxWrite, false},
		{"under MaxWrite", MaxWrite / 2, false},
		{"negative", -time.Second, false},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bucket := fmt.Sprintf("IDEM_CLAIM_TIMEOUT_%d", i)
			_, err := Open(t.Context(), js, Config{Bucket: bucket, ClaimTimeout: tc.timeout})
			if tc.taken {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Open took a ClaimTimeout of %v with writes bounded to %v", tc.timeout, MaxWrite)
			}
			if _, err := js.KeyValue(t.Context(), bucket); !errors.Is(err, jetstream.ErrBucketNotFound) {
				t.Fatalf("bucket of a refused config: %v, want ErrBucketNotFound", err)
			}
		})
	}
}

// TestRecordsExpire: after TTL a key is forgotten and claimable again,
// whatever request comes.
func TestRecordsExpire(t *testing.T) {
	s := open(t, Config{TTL: time.Second})
	ctx := t.Context()
	c, _, err := s.Begin(ctx, "k", "req")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Finish(ctx, 200, []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, func() error {
		c, replay, err := s.Begin(ctx, "k", "other")
		if err == nil && c != nil && replay == nil {
			return nil
		}
		if !errors.Is(err, ErrMismatch) {
			t.Fatalf("Begin on an expiring key: claim %v, replay %v, err %v", c, replay, err)
		}
		return errors.New("the record outlived its TTL by 14 s")
	})
}

// TestFingerprints: every part of a request changes its hash, and keys
// are scoped by workspace and user.
func TestFingerprints(t *testing.T) {
	base := RequestHash("POST", "/a", []byte("{}"), "application/json", "s1")
	for _, c := range []struct {
		name string
		hash string
	}{
		{"method", RequestHash("PUT", "/a", []byte("{}"), "application/json", "s1")},
		{"path", RequestHash("POST", "/b", []byte("{}"), "application/json", "s1")},
		{"body", RequestHash("POST", "/a", []byte("{ }"), "application/json", "s1")},
		{"media type", RequestHash("POST", "/a", []byte("{}"), "text/plain", "s1")},
		{"privileges", RequestHash("POST", "/a", []byte("{}"), "application/json", "s2")},
		{"parts moved across the boundary", RequestHash("POST", "/a", []byte("s1{}"), "application/json", "")},
	} {
		if c.hash == base {
			t.Errorf("%s: same hash as the base request", c.name)
		}
	}
	if RequestHash("POST", "/a", []byte("{}"), "application/json", "s1") != base {
		t.Error("the same request hashes differently")
	}
	if Key("w1", "u1", "k") == Key("w2", "u1", "k") || Key("w1", "u1", "k") == Key("w1", "u2", "k") {
		t.Error("keys of different callers meet")
	}
}

// waitFor polls cond until it returns nil, and fails the test with cond's
// last error once timeout has passed.
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

// An answer is kept sealed under a key only its own request yields: the
// bucket holds neither the answer nor the request's fingerprint in a form
// that gives the other away, and a replay opens it.
func TestAnswersAreSealed(t *testing.T) {
	nc := natstest.Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := Open(ctx, js, Config{Bucket: "IDEM_SEALED"})
	if err != nil {
		t.Fatal(err)
	}
	request := RequestHash("POST", "/api/data/notifications", []byte(`{"subject":"SECRET-SUBJECT-3c9d"}`))
	claim, _, err := s.Begin(ctx, "k", request)
	if err != nil {
		t.Fatal(err)
	}
	answer := []byte(`{"data":{"subject":"SECRET-SUBJECT-3c9d"}}`)
	if err := claim.Finish(ctx, 200, answer, 0); err != nil {
		t.Fatal(err)
	}
	stored, err := s.kv.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	var rec Record
	if err := json.Unmarshal(stored.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(rec.Body), "SECRET-SUBJECT-3c9d") || strings.Contains(string(stored.Value()), request) {
		t.Fatalf("the stored record gives the answer or the request away: %s", stored.Value())
	}
	if _, replay, err := s.Begin(ctx, "k", request); err != nil || replay == nil || string(replay.Body) != string(answer) {
		t.Fatalf("replay: %+v, %v", replay, err)
	}
	if _, _, err := s.Begin(ctx, "k", RequestHash("POST", "/api/data/notifications", []byte(`{"subject":"other"}`))); !errors.Is(err, ErrMismatch) {
		t.Fatalf("another request: %v, want ErrMismatch", err)
	}
}

// TestAClaimCutShortIsNotLost: a claim whose caller went away while its
// write was under way (a client that disconnected) is the caller's, who
// settles it, so a retry executes at once. The write used to end with the
// caller's context: the record landed, its answer was lost, and the key
// was held by no one until ClaimTimeout, so the retry waited, then
// answered 409.
func TestAClaimCutShortIsNotLost(t *testing.T) {
	s := open(t, Config{})
	ctx, cancel := context.WithCancel(t.Context())
	s.kv = &cutAfterCreate{KeyValue: s.kv, cancel: cancel}
	claim, _, err := s.Begin(ctx, "k", "req")
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	if err := claim.Settle(ctx, 0, nil, 0); err != nil { // no answer: the client is gone
		t.Fatal(err)
	}
	retry, cancelRetry := context.WithTimeout(t.Context(), time.Second)
	defer cancelRetry()
	if again, _, err := s.Begin(retry, "k", "req"); err != nil || !again.Again() {
		t.Fatalf("the retry: claim %+v, %v; want to execute again at once", again, err)
	}
}

// cutAfterCreate cancels the caller of a Create as its write lands, and
// loses the answer when that was the write's context.
type cutAfterCreate struct {
	jetstream.KeyValue
	cancel func()
}

func (c *cutAfterCreate) Create(ctx context.Context, key string, val []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	rev, err := c.KeyValue.Create(ctx, key, val, opts...)
	c.cancel()
	if err == nil && ctx.Err() != nil {
		return 0, ctx.Err()
	}
	return rev, err
}

// failingUpdates is a bucket whose Update fails, as a store refusing
// writes does.
type failingUpdates struct {
	jetstream.KeyValue
	err     error
	updates int
}

func (f *failingUpdates) Update(context.Context, string, []byte, uint64) (uint64, error) {
	f.updates++
	return 0, f.err
}

// TestTakeoverFailures: taking a record over (a stale claim, an unanswered
// request) whose write fails answers the store's error. On a full bucket
// that is ErrFull at once; any other failure is waited out between
// attempts. Both used to retry at once, round trip after round trip, and
// answer a bare deadline error when the caller's time was up.
func TestTakeoverFailures(t *testing.T) {
	broken := errors.New("writes are failing")
	cases := []struct {
		name       string
		maxBytes   int64
		unanswered bool  // the record is an unanswered request's, not a stale claim
		fill       bool  // fill the bucket before the takeover
		updateErr  error // every Update fails with it
		want       error
	}{
		{"stale claim on a full bucket", 16 << 10, false, true, nil, ErrFull},
		{"stale claim while writes fail", 0, false, false, broken, broken},
		{"unanswered request while writes fail", 0, true, false, broken, broken},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := &clock{now: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}
			s := open(t, Config{ClaimTimeout: 15 * time.Second, Now: clk.Now, MaxBytes: tc.maxBytes})
			ctx := t.Context()
			// Keys of one length make records of one size, so the full
			// bucket has no room for the takeover's record either.
			first, _, err := s.Begin(ctx, "k000", "req")
			if err != nil {
				t.Fatal(err)
			}
			if tc.unanswered {
				if err := first.Unanswered(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; tc.fill; i++ {
				_, _, err := s.Begin(ctx, fmt.Sprintf("f%03d", i), "req")
				if errors.Is(err, ErrFull) {
					break
				}
				if err != nil || i == 999 {
					t.Fatalf("filling the bucket, claim %d: %v", i, err)
				}
			}
			// Fractional seconds make the takeover's record longer than the
			// stale one: a full bucket still takes a replacement no larger.
			clk.add(16*time.Second + 123456789)
			failing := &failingUpdates{KeyValue: s.kv, err: tc.updateErr}
			if tc.updateErr != nil {
				s.kv = failing
			}
			short, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_, _, err = s.Begin(short, "k000", "req")
			if !errors.Is(err, tc.want) {
				t.Fatalf("Begin: %v, want %v", err, tc.want)
			}
			// A second at 25 ms doubling is 6 attempts; spinning was thousands.
			if failing.updates > 20 {
				t.Fatalf("%d takeover attempts within a second", failing.updates)
			}
		})
	}
}

// An answer too large to keep is not kept, and its key stays bound to its
// request as after a failure: kept, it would take a bucket every
// workspace shares a megabyte at a time, and past the log's largest
// message it could never be written (its claim held its retries until it
// went stale, each waiting out the writes' 10 s). A retry executes again
// as one that ran before; another request under the key is refused.
func TestAnswerTooLargeIsNotKept(t *testing.T) {
	js, err := jetstream.New(natstest.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	s, err := Open(ctx, js, Config{Bucket: "IDEM_LARGE", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{MaxRecord, 2 << 20} {
		key := fmt.Sprintf("k%d", size)
		claim, _, err := s.Begin(ctx, key, "req")
		if err != nil {
			t.Fatal(err)
		}
		if err := claim.Finish(ctx, 400, make([]byte, size), 0); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("an answer of %d bytes: %v, want ErrTooLarge", size, err)
		}
		again, replay, err := s.Begin(ctx, key, "req")
		if err != nil || replay != nil || !again.Again() {
			t.Fatalf("a retry of an answer not kept: claim %v, replay %v, %v; want a claim that runs again", again, replay, err)
		}
		if _, _, err := s.Begin(ctx, key, "another request"); !errors.Is(err, ErrMismatch) {
			t.Fatalf("another request under the key of an answer not kept: %v, want ErrMismatch", err)
		}
		if err := again.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	claim, _, err := s.Begin(ctx, "small", "req")
	if err != nil {
		t.Fatal(err)
	}
	if err := claim.Finish(ctx, 200, make([]byte, MaxRecord/2), 0); err != nil {
		t.Fatalf("an answer of %d bytes: %v", MaxRecord/2, err)
	}
}

// TestReplayable: answers of the command itself are replayed under their
// key; refusals of how it was asked, lost races and failures let a retry
// run again.
func TestReplayable(t *testing.T) {
	for status, want := range map[int]bool{
		200: true, 400: true, 404: true, 422: true,
		403: false, 409: false, 413: false, 415: false, 429: false, 500: false, 503: false,
	} {
		if got := Replayable(status); got != want {
			t.Errorf("Replayable(%d) = %v, want %v", status, got, want)
		}
	}
}

func TestValidKey(t *testing.T) {
	long := make([]byte, 256)
	for i := range long {
		long[i] = 'k'
	}
	for key, want := range map[string]bool{
		"k": true, "order-42 retry#1": true, string(long[:255]): true,
		"": false, string(long): false, "tab\there": false, "é": false, "\x7f": false,
	} {
		if got := ValidKey(key); got != want {
			t.Errorf("ValidKey(%q) = %v, want %v", key, got, want)
		}
	}
}

// TestSettleTriesAPassingFailureAgain: a claim whose answer could not be
// written for a moment (here the bucket refuses every record for 300 ms)
// is settled once the bucket takes writes again, so that a retry of the
// request replays its answer instead of waiting out a pending claim. The
// NATS transport wrote once and gave up, leaving the claim pending.
func TestSettleTriesAPassingFailureAgain(t *testing.T) {
	js, err := jetstream.New(natstest.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	s, err := Open(ctx, js, Config{Bucket: "IDEM_PASSING"})
	if err != nil {
		t.Fatal(err)
	}
	claim, _, err := s.Begin(ctx, "k", "req")
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, "KV_IDEM_PASSING")
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.CachedInfo().Config
	cfg.MaxMsgSize = 16 // no record fits
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	restored := make(chan struct{})
	go func() {
		defer close(restored)
		time.Sleep(300 * time.Millisecond) // the length of the failure, not a wait for it
		cfg.MaxMsgSize = -1
		if _, err := js.UpdateStream(context.Background(), cfg); err != nil {
			t.Error(err)
		}
	}()
	err = claim.Settle(ctx, 200, []byte(`{"n":1}`), 7)
	<-restored
	if err != nil {
		t.Fatalf("Settle across a passing failure: %v", err)
	}
	claim, replay, err := s.Begin(ctx, "k", "req")
	if err != nil || claim != nil || replay == nil || replay.Status != 200 || string(replay.Body) != `{"n":1}` || replay.Position != 7 {
		t.Fatalf("retry after the failure: claim %v, replay %+v, err %v", claim, replay, err)
	}
}
