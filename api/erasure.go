package api

import (
	"context"
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
			return err
		}
		writeOK(w, rec)
		return nil
	}))
	s.router.POST(base+"/workspace", s.authed(func(w http.ResponseWriter, r *http.Request, _ httprouter.Params, c commands.Caller) error {
		rec, err := s.cfg.Erasure.Workspace(r.Context(), c)
		if err != nil {
			return err
		}
		writeOK(w, rec)
		return nil
	}))
}
