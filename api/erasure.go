package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/julienschmidt/httprouter"

	"astro/commands"
	"astro/commands/erasure"
)

// Erasure erases data on request.
type Erasure interface {
	User(ctx context.Context, by commands.Caller, user string) (erasure.Receipt, error)
	Workspace(ctx context.Context, by commands.Caller) (erasure.Receipt, error)
}

// erasureRoutes serve erasure on request, in the caller's workspace only:
// a token of one workspace can never name another.
func (s *Server) erasureRoutes() {
	const base = "/api/data/erasure"
	s.router.POST(base+"/users/:userId", s.authed(func(w http.ResponseWriter, r *http.Request, p httprouter.Params, c commands.Caller) error {
		rec, err := s.cfg.Erasure.User(r.Context(), c, p.ByName("userId"))
		if err != nil {
			return erasureFailed(err)
		}
		writeOK(w, rec)
		return nil
	}))
	s.router.POST(base+"/workspace", s.authed(func(w http.ResponseWriter, r *http.Request, _ httprouter.Params, c commands.Caller) error {
		rec, err := s.cfg.Erasure.Workspace(r.Context(), c)
		if err != nil {
			return erasureFailed(err)
		}
		writeOK(w, rec)
		return nil
	}))
}

// erasureFailed is the answer of an erasure that failed. A refusal keeps
// its code. Anything else is the log or the database not answering, or an
// event no build can read (commands.ReadFailed): the first is worth a
// retry, with the same Idempotency-Key, since a begun erasure stays in its
// ledger until it is finished, by the retry or at the next start.
func erasureFailed(err error) error {
	var coded *commands.Error
	if errors.As(err, &coded) {
		return err
	}
	return commands.ReadFailed(err)
}
