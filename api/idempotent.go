package api

import (
	"bytes"
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	"astro/api/idempotency"
	"astro/commands"
)

// Idempotency keeps the answers of writes that carried an Idempotency-Key.
type Idempotency interface {
	Begin(ctx context.Context, key, request string) (*idempotency.Claim, *idempotency.Record, error)
}

// idempotent runs a write at most once per key: the first request executes
// and its answer is recorded; a retry with the same request gets that answer
// again, marked Idempotent-Replayed; the same key with another request is
// refused with 422.
func (s *Server) idempotent(w http.ResponseWriter, r *http.Request, p httprouter.Params, c commands.Caller, h handler, key string) error {
	if err := CheckIdempotencyKey(key); err != nil {
		return err
	}
	// A body refused for how it came needs no claim of the key. (A write
	// without a body reads none: its headers are not checked.)
	if r.ContentLength != 0 {
		if err := checkBodyHeaders(w, r); err != nil {
			return err
		}
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))

	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	// The answer depends on who asks and how, not only on what: a retry
	// with fewer privileges or another body type is another request.
	mediaType, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	request := idempotency.RequestHash(r.Method, r.URL.RequestURI(), body, mediaType, idempotency.Privileges(c.Scopes))
	// The record keeps the position's number; its stream is the route's.
	stream := HistoryPositions
	if strings.HasPrefix(r.URL.Path, "/api/data/notifications") {
		stream = InboxPositions
	}
	claim, replay, err := s.cfg.Idempotency.Begin(ctx, idempotency.Key(c.WorkspaceID, c.UserID, key), request)
	switch {
	case err != nil:
		return IdempotencyError(err)
	case replay != nil:
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		s.metrics.IdempotentReplay()
		w.Header().Set("Idempotent-Replayed", "true")
		if replay.Position > 0 {
			s.setPosition(w, c, stream, replay.Position)
		}
		w.WriteHeader(replay.Status)
		_, _ = w.Write(replay.Body)
		return nil
	}

	c.IdempotencyKey, c.Again = key, claim.Again()
	rec := &recorder{ResponseWriter: w}
	// The claim must outlive the write: bound the write well inside it.
	work, cancelWork := context.WithTimeout(r.Context(), s.maxWrite)
	defer cancelWork()
	// The error is answered with the work's context: when its bound, not
	// the request's, cut the write short, writeError must see that deadline
	// to answer 503 with Retry-After, as it does for the request's own.
	wr := r.WithContext(work)
	if err := h(rec, wr, p, c); err != nil {
		writeError(rec, wr, s.log, err)
	}
	position, _ := s.seal.Open(c.WorkspaceID, stream, rec.Header().Get(HeaderPosition))
	err = claim.Settle(r.Context(), rec.status, rec.body.Bytes(), position)
	switch {
	case errors.Is(err, idempotency.ErrTooLarge):
		s.log.Debug("idempotency record not kept", "err", err)
	case err != nil:
		s.log.Warn("idempotency record", "err", err)
	}
	return nil
}

// IdempotencyError is the answer to a failed Idempotency.Begin, on every
// transport.
func IdempotencyError(err error) error {
	switch {
	case errors.Is(err, idempotency.ErrMismatch):
		return commands.Errorf(commands.EUnprocessable, "This Idempotency-Key was already used with a different request.")
	case errors.Is(err, idempotency.ErrInProgress):
		return commands.Errorf(commands.EConflict, "A request with this Idempotency-Key is still in progress; retry later.")
	case errors.Is(err, idempotency.ErrFull):
		return &commands.Error{Code: commands.EUnavailable, Message: "Too many Idempotency-Keys are remembered right now; retry later, or retry without a key.", Err: err}
	default:
		return &commands.Error{Code: commands.EUnavailable, Message: "The service is temporarily unavailable; try again.", Err: err}
	}
}

// CheckIdempotencyKey refuses a key that cannot be an Idempotency-Key, on
// every transport.
func CheckIdempotencyKey(key string) error {
	if !idempotency.ValidKey(key) {
		return commands.Invalid(map[string][]string{"Idempotency-Key": {"The key must be 1 to 255 printable ASCII characters."}})
	}
	return nil
}

// recorder passes a response through and keeps a copy.
type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}
