// Package natscmd accepts commands from upstream services over NATS, for
// services that speak NATS rather than HTTP. NATS permissions decide who
// may publish on the command subjects at all; what a message may do is
// decided as on HTTP, by the bearer token it carries: the same verifier,
// the same privilege (notifications:send), the workspace the token names.
//
// Subject astro.commands.notifications.send, request/reply, header
// "Authorization: Bearer <JWT>". The payload is the HTTP send body
// (api.SendRequest, held by api.DecodeSend to the JSON body rules of HTTP):
//
//	{"recipientId":"u1","senderId":"<the sending user's UUID>","notificationType":"task",
//	 "subject":"...","message":"...","data":{...}}
//
// A senderId (or a data taskId, projectId, assigneeId) that is no UUID is
// named by its name-based UUID, as over HTTP: the same decoder does it.
//
// A "workspaceId" field is optional; when present it must be the token's
// workspace (403 otherwise). Optional headers: x-integration-name,
// Idempotency-Key. The reply is the same envelope the HTTP API answers
// with, 401, 403 and the per-caller rate limit's 429 included, its data
// the NotificationDto.
package natscmd

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"astro/api"
	"astro/api/auth"
	"astro/api/idempotency"
	"astro/commands"
	"astro/commands/notifications"
	"astro/events"
	"astro/query"
)

// SendSubject is where upstream services send notifications.
const SendSubject = "astro.commands.notifications.send"

// Config holds the handlers commands go to and the verifier of the
// tokens they carry.
type Config struct {
	Notifications *notifications.Handlers
	Verifier      *auth.Verifier
	// Idempotency, when set, holds commands with an Idempotency-Key header
	// to the rules of HTTP writes, in the same records: one execution per
	// key, a replay answers what was first answered, and a key reused with
	// another request (or first used over HTTP) answers 422.
	Idempotency api.Idempotency
	// Answers answers a send; a retry of one delivered before needs the
	// read model.
	Answers api.SendAnswers
	// RateLimiter holds each caller to its budget; give it the HTTP
	// server's, so that a caller's sends over NATS and its requests over
	// HTTP draw on one. Nil limits nothing.
	RateLimiter *api.RateLimiter
	// Workers is how many sends an instance answers at once; default 32.
	Workers int
	// MaxBodyBytes bounds a send's payload, as the HTTP API bounds a
	// body (give it the same); default 256 KiB. NATS itself takes up to
	// its max_payload, 1 MiB by default.
	MaxBodyBytes int
	Logger       *slog.Logger
}

// Server answers command messages.
type Server struct {
	nc  *nats.Conn
	cfg Config
}

// New returns a server on nc.
func New(nc *nats.Conn, cfg Config) (*Server, error) {
	if nc == nil || cfg.Notifications == nil || cfg.Verifier == nil || cfg.Answers.Queries == nil || cfg.Answers.Projected == nil {
		return nil, errors.New("natscmd: New needs a connection, notification handlers, their answers and a token verifier")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 32
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 256 << 10
	}
	return &Server{nc: nc, cfg: cfg}, nil
}

// Run serves until ctx ends, then lets the sends under way finish. Instances
// share the work through a queue group. Each answers up to Workers sends
// at once: a send may wait up to its 10 s (for an Idempotency-Key another
// request holds, for the read model), and the subscription's one goroutine
// would hold every send behind it. Past Workers the subscription waits,
// and its pending limits push back as before.
func (s *Server) Run(ctx context.Context) error {
	busy := make(chan struct{}, s.cfg.Workers)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		closed bool // under mu: a callback after it starts nothing, so every Add precedes the Wait
	)
	sub, err := s.nc.QueueSubscribe(SendSubject, "astro", func(m *nats.Msg) {
		if m.Reply != "" && !inbox(m.Reply) {
			s.cfg.Logger.Warn("command refused: its reply subject is no inbox", "subject", m.Subject, "reply", m.Reply)
			return
		}
		mu.Lock()
		if closed {
			mu.Unlock()
			return
		}
		wg.Add(1)
		mu.Unlock()
		select {
		case busy <- struct{}{}:
		case <-ctx.Done():
			wg.Done()
			return // not answered: the requester times out, as when no instance runs
		}
		go func() {
			defer func() { <-busy; wg.Done() }()
			// A send under way when the service stops runs to its end (its
			// own 10 s bound, within the shutdown's grace): cut short, its
			// event could be in the log while its sender gets an error.
			s.send(context.WithoutCancel(ctx), m)
		}()
	})
	if err != nil {
		return err
	}
	// What waits for a worker waits in the subscription's queue, which by
	// default holds half a million messages or 64 MiB: more than the
	// service's whole memory limit. Past this, NATS drops sends (a slow
	// consumer), and their senders time out and retry, as when the
	// service is away.
	if err := sub.SetPendingLimits(64*s.cfg.Workers, 16<<20); err != nil {
		return err
	}
	<-ctx.Done()
	err = sub.Unsubscribe()
	mu.Lock()
	closed = true
	mu.Unlock()
	wg.Wait()
	return err
}

func (s *Server) send(ctx context.Context, m *nats.Msg) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	reqID := events.NewID(time.Now())
	var answer query.NotificationDto
	caller, err := s.caller(ctx, m, reqID)
	if err == nil {
		// Before any work, a replay's included, as on HTTP. The reply has
		// no headers: the wait HTTP gives in Retry-After is in the message.
		_, err = s.cfg.RateLimiter.Take(caller.WorkspaceID, caller.UserID)
	}
	if err == nil && len(m.Data) > s.cfg.MaxBodyBytes {
		err = commands.Errorf(commands.ETooLarge, "The body is too large: at most %d bytes.", s.cfg.MaxBodyBytes)
	}
	var claim *idempotency.Claim
	if err == nil && caller.IdempotencyKey != "" && s.cfg.Idempotency != nil {
		var replay *idempotency.Record
		if claim, replay, err = s.claim(ctx, m, caller); replay != nil {
			s.respond(m, replay.Body)
			return
		}
		caller.Again = claim != nil && claim.Again()
	}
	if err == nil {
		answer, err = s.handle(ctx, m, caller)
	}
	status, body := s.reply(m, reqID, answer, err)
	if claim != nil {
		s.record(ctx, claim, status, body)
	}
}

// handle decodes the send of m and runs it as caller. The body is refused
// as over HTTP, a workspaceId naming another workspace included: both
// transports turn it into the command with api.SendRequest.Command.
func (s *Server) handle(ctx context.Context, m *nats.Msg, caller commands.Caller) (query.NotificationDto, error) {
	req, err := api.DecodeSend(m.Data)
	if err != nil {
		return query.NotificationDto{}, err
	}
	cmd, err := req.Command(caller)
	if err != nil {
		return query.NotificationDto{}, err
	}
	sent, res, err := s.cfg.Notifications.Send.Handle(ctx, cmd)
	if err != nil {
		return query.NotificationDto{}, err
	}
	return s.cfg.Answers.Answer(ctx, caller, sent, res)
}

// claim takes the message's Idempotency-Key, or returns the answer kept
// under it. The request is the subject and the payload, so the same key
// first used over HTTP (another method and path) is another request.
func (s *Server) claim(ctx context.Context, m *nats.Msg, c commands.Caller) (*idempotency.Claim, *idempotency.Record, error) {
	if err := api.CheckIdempotencyKey(c.IdempotencyKey); err != nil {
		return nil, nil, err
	}
	request := idempotency.RequestHash("NATS", m.Subject, m.Data, idempotency.Privileges(c.Scopes))
	claim, replay, err := s.cfg.Idempotency.Begin(ctx, idempotency.Key(c.WorkspaceID, c.UserID, c.IdempotencyKey), request)
	if err != nil {
		return nil, nil, api.IdempotencyError(err)
	}
	return claim, replay, nil
}

// record keeps the answer under its key as idempotency.Claim.Settle
// does for every transport; a NATS answer gives no position.
func (s *Server) record(ctx context.Context, claim *idempotency.Claim, status int, body []byte) {
	err := claim.Settle(ctx, status, body, 0)
	switch {
	case errors.Is(err, idempotency.ErrTooLarge):
		s.cfg.Logger.Debug("idempotency record not kept", "subject", SendSubject, "err", err)
	case err != nil:
		s.cfg.Logger.Warn("idempotency record", "subject", SendSubject, "err", err)
	}
}

// caller authenticates a message as the HTTP API authenticates a request.
func (s *Server) caller(ctx context.Context, m *nats.Msg, reqID string) (commands.Caller, error) {
	// NATS keeps the case clients write, and HTTP habits send
	// "authorization" as often as "Authorization": a header is read by its
	// name in any case, and refused when given twice with values that
	// differ.
	authz, err := api.SingleHeader(m.Header, "Authorization")
	if err != nil {
		return commands.Caller{}, err
	}
	key, err := api.SingleHeader(m.Header, "Idempotency-Key")
	if err != nil {
		return commands.Caller{}, err
	}
	if key == "" && api.HeaderSent(m.Header, "Idempotency-Key") {
		return commands.Caller{}, api.CheckIdempotencyKey(key) // sent empty: refused as over HTTP
	}
	integration, err := api.SingleHeader(m.Header, "x-integration-name")
	if err != nil {
		return commands.Caller{}, err
	}
	token, err := auth.FromHeader(authz)
	if err == nil {
		var claims auth.Claims
		if claims, err = s.cfg.Verifier.Verify(ctx, token); err == nil {
			return commands.Caller{
				UserID:         claims.UserID,
				WorkspaceID:    claims.WorkspaceID,
				Scopes:         claims.Scopes,
				Integration:    api.IntegrationName(integration),
				CorrelationID:  reqID,
				IdempotencyKey: key,
			}, nil
		}
	}
	msg := "Authentication failed"
	if reason := auth.Reason(err); reason != "" {
		msg += ": " + reason
	}
	return commands.Caller{}, &commands.Error{Code: commands.EUnauthorized, Message: msg + ".", Err: err}
}

// reply answers m with the envelope of data, or of err, and returns the
// answer's status and body.
func (s *Server) reply(m *nats.Msg, reqID string, data any, err error) (int, []byte) {
	status, env := 200, api.Envelope{Success: true, StatusCode: api.StatusName(200), Data: data}
	if err != nil {
		status, env = api.ErrorEnvelope(err, reqID)
		if status >= 500 {
			s.cfg.Logger.Error("command failed", "subject", m.Subject, "request_id", reqID, "err", err)
		}
	}
	body, _ := json.Marshal(env) // an Envelope of plain values always encodes
	s.respond(m, body)
	return status, body
}

// inbox reports whether a reply subject is a requester's inbox: _INBOX.…,
// _INBOX_<user>.… for a user with an inbox prefix of its own, or one NATS
// maps itself, _R_.… for a requester in another account that imports the
// commands and _GR_.… across a gateway. The requester chooses its reply
// subject and NATS does not check it, while Astro answers on its own
// connection, which may publish anywhere: an answer sent to astro.events.…
// would be stored in the log as an aggregate's event, and break it. A
// command asking for its answer anywhere else is not executed.
func inbox(subject string) bool {
	for _, prefix := range []string{"_INBOX.", "_INBOX_", "_R_.", "_GR_."} {
		if strings.HasPrefix(subject, prefix) {
			return true
		}
	}
	return false
}

func (s *Server) respond(m *nats.Msg, body []byte) {
	if m.Reply == "" {
		return
	}
	if err := m.Respond(body); err != nil {
		s.cfg.Logger.Warn("reply", "subject", m.Subject, "err", err)
	}
}
