// Package natscmd accepts commands from upstream services over NATS, for
// services that speak NATS rather than HTTP. Who may publish is decided by
// NATS permissions on the subjects, so a message here acts with the
// privilege its subject implies.
//
// Subject astro.commands.notifications.send, request/reply. The payload is
// the HTTP send body plus the workspace:
//
//	{"workspaceId":"w1","recipientId":"u1","senderId":"svc","notificationType":"task",
//	 "subject":"...","message":"...","data":{...}}
//
// Optional headers: x-integration-name, Idempotency-Key. The reply is the
// same envelope the HTTP API answers with, its data the NotificationDto.
package natscmd

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"astro/api"
	"astro/commands"
	"astro/commands/notifications"
	"astro/events"
)

// SendSubject is where upstream services send notifications.
const SendSubject = "astro.commands.notifications.send"

// Config holds the handlers commands go to.
type Config struct {
	Notifications *notifications.Handlers
	Logger        *slog.Logger
}

// Server answers command messages.
type Server struct {
	nc  *nats.Conn
	cfg Config
}

// New returns a server on nc.
func New(nc *nats.Conn, cfg Config) (*Server, error) {
	if nc == nil || cfg.Notifications == nil {
		return nil, errors.New("natscmd: New needs a connection and notification handlers")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Server{nc: nc, cfg: cfg}, nil
}

type sendMessage struct {
	WorkspaceID      string          `json:"workspaceId"`
	RecipientID      string          `json:"recipientId"`
	SenderID         string          `json:"senderId"`
	NotificationType string          `json:"notificationType"`
	Subject          string          `json:"subject"`
	Message          string          `json:"message"`
	Data             json.RawMessage `json:"data"`
}

// Run serves until ctx ends. Instances share the work through a queue group.
func (s *Server) Run(ctx context.Context) error {
	sub, err := s.nc.QueueSubscribe(SendSubject, "astro", func(m *nats.Msg) { s.send(ctx, m) })
	if err != nil {
		return err
	}
	<-ctx.Done()
	return sub.Drain()
}

func (s *Server) send(ctx context.Context, m *nats.Msg) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	reqID := events.NewID(time.Now())
	var msg sendMessage
	var sent events.NotificationSent
	err := json.Unmarshal(m.Data, &msg)
	if err != nil {
		err = commands.Errorf(commands.EInvalid, "The message is not a valid JSON object.")
	} else if !events.ValidToken(msg.WorkspaceID) {
		err = commands.Invalid(map[string][]string{"workspaceId": {"The workspace id is required: 1 to 64 letters, digits, '-' or '_'."}})
	} else {
		sent, _, err = s.cfg.Notifications.Send.Handle(ctx, notifications.Send{
			Caller: commands.Caller{
				UserID: msg.SenderID, WorkspaceID: msg.WorkspaceID,
				// The subject's NATS permissions are the privilege.
				Scopes:         []string{notifications.ScopeSend},
				Integration:    m.Header.Get("x-integration-name"),
				CorrelationID:  reqID,
				IdempotencyKey: m.Header.Get("Idempotency-Key"),
			},
			RecipientID: msg.RecipientID, SenderID: msg.SenderID, NotificationType: msg.NotificationType,
			Subject: msg.Subject, Message: msg.Message, Data: msg.Data,
		})
	}
	env := api.Envelope{Success: true, StatusCode: api.StatusName(200), Data: api.SentDto(sent)}
	if err != nil {
		var status int
		status, env = api.ErrorEnvelope(err, reqID)
		if status >= 500 {
			s.cfg.Logger.Error("command failed", "subject", SendSubject, "request_id", reqID, "err", err)
		}
	}
	if m.Reply == "" {
		return
	}
	body, _ := json.Marshal(env) // an Envelope of plain values always encodes
	if err := m.Respond(body); err != nil {
		s.cfg.Logger.Warn("reply", "subject", SendSubject, "err", err)
	}
}
