// Package idempotency makes retried writes safe: a write that carries an
// Idempotency-Key is executed once per (workspace, user, key); a retry with
// the same request gets the first answer replayed, and the same key with a
// different request is refused.
//
// Records live in a JetStream KV bucket with a time to live. An answer is
// kept sealed (AES-GCM) under a key derived from the request itself, which
// the record does not hold: only a retry of that very request, which has
// its content anyway, can read it. So a notification deleted or erased
// since leaves no readable copy here, whatever the bucket's files keep
// until the record expires. The first
// request claims its key with an atomic create (a "pending" record), so two
// racing retries never both execute; the answer replaces the claim when it
// is known. A claim whose owner died (its process was killed) is taken over
// once it is older than the claim timeout (15 s; writes under a claim are
// bounded to 10 s). The bucket is bounded (Config.MaxBytes): when it is
// full, Begin answers ErrFull and nothing executes under a key until
// records expire; writes without a key are not affected. The commands layer also derives
// event ids from the key, and a claim says when it takes over (Again), so
// that a request executed again appends nothing twice.
package idempotency

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Config tunes the store.
type Config struct {
	Bucket string        // default "ASTRO_IDEMPOTENCY"
	TTL    time.Duration // how long a key is remembered; default 24h
	// ClaimTimeout is when a pending claim is considered abandoned (its
	// process died); it must exceed MaxWrite, or Open refuses it. Default
	// 15s.
	ClaimTimeout time.Duration
	Replicas     int
	// MaxBytes bounds the bucket; default 1 GiB. A record is the answer's
	// body plus about 200 bytes, at most MaxRecord, so the default holds
	// some million sends' answers of a usual size, and 16,384 of the
	// largest: a caller that makes the largest answers on purpose, at the
	// default rate limit (50/s), fills it in about six minutes. There is no
	// quota per caller.
	MaxBytes int64
	Now      func() time.Time
}

// Store keeps idempotency records.
type Store struct {
	kv  jetstream.KeyValue
	cfg Config
}

// Open creates or updates the bucket.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		cfg.Bucket = "ASTRO_IDEMPOTENCY"
	}
	if cfg.TTL == 0 {
		cfg.TTL = 24 * time.Hour
	}
	if cfg.ClaimTimeout == 0 {
		cfg.ClaimTimeout = 15 * time.Second
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = 1 << 30
	}
	// A claim no older than MaxWrite may be a live request still writing:
	// taking it over would run the request twice at once.
	if cfg.ClaimTimeout <= MaxWrite {
		return nil, fmt.Errorf("idempotency: ClaimTimeout %v must exceed MaxWrite %v", cfg.ClaimTimeout, MaxWrite)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      cfg.Bucket,
		Description: "Idempotency-Key records of writes",
		TTL:         cfg.TTL,
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		MaxBytes:    cfg.MaxBytes,
	})
	if err != nil {
		return nil, fmt.Errorf("create bucket %s: %w", cfg.Bucket, err)
	}
	return &Store{kv: kv, cfg: cfg}, nil
}

// MaxWrite bounds a write that runs under a claim, so that a claim older
// than ClaimTimeout can only be a dead process's.
const MaxWrite = 10 * time.Second

// Record is what a key is bound to.
type Record struct {
	Request   string    `json:"request"`   // fingerprint of the request it was first used with
	Pending   bool      `json:"pending"`   // claimed, answer not known yet
	ClaimedAt time.Time `json:"claimedAt"` // when the claim was made
	Status    int       `json:"status,omitempty"`
	Body      []byte    `json:"body,omitempty"`
	// Position is the log position the answer gave (X-Astro-Position), 0
	// for none: a retry's reads wait for it as the first answer's would.
	Position uint64 `json:"position,omitempty"`

	// Unanswered: the request failed in a way that may have left it done
	// (a 5xx): a retry of it executes again, another request is refused.
	Unanswered bool `json:"unanswered,omitempty"`
}

var (
	// ErrMismatch: the key was first used with another request.
	ErrMismatch = errors.New("idempotency key reused with another request")
	// ErrInProgress: the first request with this key has not finished.
	ErrInProgress = errors.New("a request with this idempotency key is in progress")
	// ErrFull: the bucket reached its MaxBytes; no new key is taken until
	// records expire.
	ErrFull = errors.New("idempotency records are at their size limit")
	// ErrTooLarge: an answer too large to keep (MaxRecord). The key stays
	// bound to its request without an answer, as after a failure: a retry
	// executes again, finding what the request appended, and another
	// request under the key is refused.
	ErrTooLarge = errors.New("idempotent answer too large to keep")
	// ErrTakenOver: the record moved under the claim, which another
	// request took over (its claimant saw this one as abandoned); no retry
	// can write this claim's outcome over it.
	ErrTakenOver = errors.New("idempotency claim taken over")
)

// moved marks an update refused because the record's revision moved.
func moved(err error) error {
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return fmt.Errorf("%w (%v)", ErrTakenOver, err)
	}
	return err
}

// MaxRecord bounds a record. An answer whose record would be larger is not
// kept: one request must not take up to a megabyte of a bucket every
// workspace shares (an answer's '<' is six bytes in JSON, and its record
// holds it in base64), and a record past the log's largest message could
// never be written at all.
const MaxRecord = 64 << 10

// Claim is the right to execute a request once.
type Claim struct {
	store *Store
	key   string
	rev   uint64
	rec   Record
	seal  cipher.AEAD
	again bool
}

// Again reports whether the request ran before under this key and may
// have done its write: the claim took over from a failure or a dead
// claimant.
func (c *Claim) Again() bool { return c.again }

// derive turns what a request's caller knows of it (RequestHash) into the
// fingerprint a record keeps and the key its answer is sealed under; one
// tells nothing of the other.
func derive(request string) (fingerprint string, seal cipher.AEAD) {
	fp := sha256.Sum256([]byte("astro idempotency fingerprint\x00" + request))
	k := sha256.Sum256([]byte("astro idempotency seal\x00" + request))
	block, _ := aes.NewCipher(k[:]) // a 32-byte key is always valid
	gcm, _ := cipher.NewGCM(block)  // and so is the standard nonce size
	return hex.EncodeToString(fp[:]), gcm
}

func sealBody(a cipher.AEAD, body []byte) []byte {
	nonce := make([]byte, a.NonceSize())
	_, _ = rand.Read(nonce) // never fails (crypto/rand)
	return a.Seal(nonce, nonce, body, nil)
}

func openBody(a cipher.AEAD, sealed []byte) ([]byte, error) {
	if len(sealed) < a.NonceSize() {
		return nil, errors.New("sealed answer too short")
	}
	return a.Open(nil, sealed[:a.NonceSize()], sealed[a.NonceSize():], nil)
}

// Key names a record: the caller's key, scoped to the workspace and user so
// that keys of different callers never meet.
func Key(workspaceID, userID, key string) string {
	h := sha256.Sum256([]byte(workspaceID + "\x00" + userID + "\x00" + key))
	return hex.EncodeToString(h[:])
}

// Privileges is the caller's privileges as a request hash takes them: a
// set, since a token refreshed meanwhile may list them in another order.
func Privileges(scopes []string) string {
	return strings.Join(slices.Compact(slices.Sorted(slices.Values(scopes))), " ")
}

// RequestHash identifies a request: method, path and body, and whatever
// else its answer depends on (extra: the body's media type, the caller's
// privileges).
func RequestHash(method, path string, body []byte, extra ...string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s %s\x00", method, path)
	for _, x := range extra {
		fmt.Fprintf(h, "%s\x00", x)
	}
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// Begin either claims key for request (the caller executes and then calls
// Claim.Finish or Claim.Release), or returns the recorded answer of the
// first execution (replay non-nil). It waits, up to ctx, while another
// request holds a fresh claim on the same key.
func (s *Store) Begin(ctx context.Context, key, request string) (claim *Claim, replay *Record, err error) {
	fingerprint, seal := derive(request)
	// waiting: the key was seen held by a request in progress, so the
	// caller's deadline ending is that request still running, wherever in
	// a KV call it ends.
	waiting := false
	// backoff spaces the takeovers whose write failed other than by a
	// race or a full bucket: such a failure is waited out, not spun on in
	// round trips until the deadline.
	backoff := 25 * time.Millisecond
	// A claim's writes go on when the caller goes away (ctx cancelled): one
	// cut short may still land, unanswered, and leave the key held by no
	// one until ClaimTimeout, so that a client that disconnected would see
	// its retry wait, then answer 409. The caller settles the claim it
	// gets, as after any request. They still end at ctx's deadline, which
	// bounds every request, an unreachable log's included.
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(MaxWrite)
	}
	wctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	for {
		rec := Record{Request: fingerprint, Pending: true, ClaimedAt: s.cfg.Now().UTC()}
		val, _ := json.Marshal(rec)
		rev, err := s.kv.Create(wctx, key, val)
		if err == nil {
			return &Claim{store: s, key: key, rev: rev, rec: rec, seal: seal}, nil, nil
		}
		if full(err) {
			return nil, nil, fmt.Errorf("claim idempotency key: %w (%v)", ErrFull, err)
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, nil, kvError(ctx, waiting, "claim idempotency key", err)
		}
		entry, err := s.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // released or expired in between: claim again
		}
		if err != nil {
			return nil, nil, kvError(ctx, waiting, "read idempotency key", err)
		}
		var found Record
		if err := json.Unmarshal(entry.Value(), &found); err != nil {
			return nil, nil, fmt.Errorf("decode idempotency record: %w", err)
		}

		var pause time.Duration
		var takeoverErr error // the takeover's failure that pause waits out
		switch {
		case found.Request != fingerprint:
			return nil, nil, ErrMismatch
		case s.abandoned(found):
			// Take the record over atomically, from that very revision.
			rev, err := s.kv.Update(wctx, key, val, entry.Revision())
			switch {
			case err == nil:
				return &Claim{store: s, key: key, rev: rev, rec: rec, seal: seal, again: true}, nil, nil
			case errors.Is(err, jetstream.ErrKeyRevisionMismatch):
				continue // another request took over first: found at once, as a fresh claim to wait for
			case full(err):
				// Full it stays until records expire.
				return nil, nil, fmt.Errorf("claim idempotency key: %w (%v)", ErrFull, err)
			}
			pause, takeoverErr = backoff, err
			backoff = min(2*backoff, time.Second)
		case !found.Pending:
			if found.Body != nil {
				if found.Body, err = openBody(seal, found.Body); err != nil {
					return nil, nil, fmt.Errorf("open idempotent answer: %w", err)
				}
			}
			return nil, &found, nil
		default:
			waiting = true
			pause = 25 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			if waiting {
				return nil, nil, ErrInProgress
			}
			return nil, nil, fmt.Errorf("take over idempotency key: %w", takeoverErr)
		case <-time.After(pause):
		}
	}
}

// abandoned reports whether a record of the same request is to be taken
// over and executed again: it failed in a way that may have left it done
// (Unanswered), or its claimant died (a claim older than ClaimTimeout).
func (s *Store) abandoned(r Record) bool {
	return r.Unanswered || r.Pending && s.cfg.Now().Sub(r.ClaimedAt) > s.cfg.ClaimTimeout
}

// kvError is the error of a failed KV call of Begin: ErrInProgress when
// the key was seen held by a request in progress (waiting) and the
// caller's deadline ended the call, as that request still running.
func kvError(ctx context.Context, waiting bool, what string, err error) error {
	if waiting && ctx.Err() != nil {
		return ErrInProgress
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Finish records the answer for replay: its status and body, and the log
// position it gave (0: none).
func (c *Claim) Finish(ctx context.Context, status int, body []byte, position uint64) error {
	c.rec.Pending, c.rec.Status, c.rec.Body, c.rec.Position = false, status, sealBody(c.seal, body), position
	val, _ := json.Marshal(c.rec)
	if len(val) > MaxRecord {
		// Kept as a request whose answer is unknown: a retry executes
		// again as one that ran before (Again), so it appends nothing
		// twice however late it comes; given up, it would be a new
		// request once the log's duplicate window had passed.
		c.rec.Status, c.rec.Body, c.rec.Position = 0, nil, 0
		if err := c.Unanswered(ctx); err != nil {
			return fmt.Errorf("record idempotent answer of %d bytes: %w; %v", len(val), ErrTooLarge, err)
		}
		return fmt.Errorf("record idempotent answer of %d bytes: %w", len(val), ErrTooLarge)
	}
	if _, err := c.store.kv.Update(ctx, c.key, val, c.rev); err != nil {
		if full(err) {
			// No room for the answer: give the key up rather than leave a
			// claim that holds its retries until it goes stale. A retry
			// then executes again, which the event ids derived from the
			// key keep from appending twice.
			if rerr := c.Release(ctx); rerr != nil {
				return fmt.Errorf("record idempotent answer: %w (%v); release: %v", ErrFull, err, rerr)
			}
			return fmt.Errorf("record idempotent answer: %w (%v)", ErrFull, err)
		}
		return fmt.Errorf("record idempotent answer: %w", moved(err))
	}
	return nil
}

// full reports a write refused because the bucket is at MaxBytes: the
// server's "maximum bytes exceeded" on a DiscardNew stream, for which the
// client has no sentinel of its own.
func full(err error) bool {
	return err != nil && strings.Contains(err.Error(), "maximum bytes exceeded")
}

// Unanswered keeps the key bound to its request without an answer, after
// a failure that may have left the request done (a timeout after the
// append): a retry of the same request executes again (and the event ids
// derived from the key keep it from appending twice), while another
// request under the key is refused, so it can never be answered with what
// the first one did.
func (c *Claim) Unanswered(ctx context.Context) error {
	c.rec.Pending, c.rec.Unanswered = false, true
	val, _ := json.Marshal(c.rec)
	if _, err := c.store.kv.Update(ctx, c.key, val, c.rev); err != nil {
		if full(err) {
			if rerr := c.Release(ctx); rerr != nil {
				return fmt.Errorf("record idempotent failure: %w (%v); release: %v", ErrFull, err, rerr)
			}
			return fmt.Errorf("record idempotent failure: %w (%v)", ErrFull, err)
		}
		return fmt.Errorf("record idempotent failure: %w", moved(err))
	}
	return nil
}

// Settle ends the claim with the answer its request got, on every
// transport: kept for replay when it is the command's own (Replayable),
// the key kept to this request without an answer when the request may
// have happened (a 5xx, or status 0: the client went away mid-request),
// given up otherwise. A claim left pending holds its key's retries until
// it goes stale, so a passing failure (a leader election) is tried again,
// for up to MaxWrite whatever ctx's cancellation: the request is over
// and its answer still has to be kept. A claim another request took over
// (ErrTakenOver) is not: nothing can write this answer over its.
func (c *Claim) Settle(ctx context.Context, status int, body []byte, position uint64) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), MaxWrite)
	defer cancel()
	for wait := 50 * time.Millisecond; ; wait *= 2 {
		var err error
		switch {
		case status >= 500 || status == 0:
			err = c.Unanswered(ctx)
		case !Replayable(status):
			err = c.Release(ctx)
		default:
			err = c.Finish(ctx, status, body, position)
		}
		if err == nil || errors.Is(err, ErrFull) || errors.Is(err, ErrTooLarge) || errors.Is(err, ErrTakenOver) {
			return err // kept, given up, or another's: nothing to try again
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// Replayable reports whether an answer with status is the command's own,
// kept for replay under its Idempotency-Key: a success, or a refusal of
// the command itself (invalid, not found, unprocessable). Server failures,
// lost races and refusals of how it was asked (privilege, size, body type,
// rate) are not: a retry runs again.
func Replayable(status int) bool {
	switch status {
	case http.StatusForbidden, http.StatusConflict, http.StatusRequestEntityTooLarge,
		http.StatusUnsupportedMediaType, http.StatusTooManyRequests:
		return false
	}
	return status < 500
}

// ValidKey reports whether key can be an Idempotency-Key: 1 to 255
// printable ASCII characters.
func ValidKey(key string) bool {
	if key == "" || len(key) > 255 {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return false
		}
	}
	return true
}

// Release gives the key up without an answer (the request failed in a way
// worth retrying), so that a retry executes again.
func (c *Claim) Release(ctx context.Context) error {
	err := c.store.kv.Delete(ctx, c.key, jetstream.LastRevision(c.rev))
	if err != nil {
		return fmt.Errorf("release idempotency key: %w", moved(err))
	}
	return nil
}
