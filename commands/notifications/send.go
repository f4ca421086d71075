package notifications

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"astro/commands"
	"astro/commands/storable"
	"astro/events"
)

// ScopeSend is the privilege an upstream service's token needs to send.
const ScopeSend = "notifications:send"

// Limits on a sent notification.
const (
	maxTypeLen    = 100
	maxSubjectLen = 1000
	maxMessageLen = 10000
	maxDataBytes  = 16 << 10
)

// Send delivers a notification to a user of the caller's workspace.
type Send struct {
	Caller           commands.Caller
	RecipientID      string
	SenderID         string
	NotificationType string
	Subject          string
	Message          string
	Data             json.RawMessage
}

// SendHandler handles Send.
type SendHandler struct{ deps }

// Handle validates, delivers, and deletes the oldest notifications when the
// inbox goes over MaxPending. It returns the delivered notification.
//
// A send under an Idempotency-Key whose notification is pending already
// (a retry after the key's record has gone) appends nothing, and neither
// does one whose events the log recognises from an earlier attempt (its
// duplicate window, after the notification was deleted): res.Events is
// empty, sent is this request, and what was delivered is the read model's
// to tell.
func (h SendHandler) Handle(ctx context.Context, cmd Send) (events.NotificationSent, commands.Result, error) {
	if !cmd.Caller.HasScope(ScopeSend) {
		return events.NotificationSent{}, commands.Result{}, commands.Errorf(commands.EForbidden, "Sending notifications needs the %s privilege.", ScopeSend)
	}
	if err := cmd.validate(); err != nil {
		return events.NotificationSent{}, commands.Result{}, err
	}
	var sent events.NotificationSent
	res, err := h.execute(ctx, cmd.Caller, cmd.RecipientID, func(in *Inbox, now time.Time) ([]events.Payload, error) {
		sent = events.NotificationSent{
			NotificationID:   events.NewID(now),
			RecipientID:      cmd.RecipientID,
			SenderID:         cmd.SenderID,
			NotificationType: cmd.NotificationType,
			Subject:          cmd.Subject,
			Message:          cmd.Message,
			Data:             cmd.Data,
			CreateDate:       now,
		}
		if cmd.Caller.IdempotencyKey != "" {
			sent.NotificationID = events.NameID(cmd.Caller.WorkspaceID, cmd.Caller.UserID, cmd.Caller.IdempotencyKey, "notification")
			if in.Has(sent.NotificationID) {
				return nil, nil // delivered by an earlier attempt of this request
			}
		}
		return in.Send(sent), nil
	})
	return sent, res, err
}

func (cmd *Send) validate() error {
	v := commands.Validation{}
	if !events.ValidToken(cmd.RecipientID) {
		v.Add("recipientId", "The recipient id is required: 1 to 64 letters, digits, '-' or '_'.")
	}
	// The public document's NotificationDto.senderId is a uuid (the
	// sending user's id), and a strict client refuses anything else. The
	// api named every other id it could (events.UUIDFor); the message says
	// what it takes.
	if !events.ValidUUID(cmd.SenderID) {
		v.Add("senderId", "The sender id is required: the sending user's UUID, such as 123e4567-e89b-12d3-a456-426614174000, or another id, stored as its name-based UUID: "+events.NameRule+".")
	}
	cmd.SenderID = strings.ToLower(cmd.SenderID)
	text := func(field, value string, limit int, required bool) {
		switch n := utf8.RuneCountInString(value); {
		case !utf8.ValidString(value):
			v.Add(field, "The text is not valid UTF-8.")
		case strings.ContainsRune(value, 0):
			// PostgreSQL cannot store NUL: refused here, not after the event.
			v.Add(field, "The text must not contain NUL characters.")
		case required && n == 0:
			v.Add(field, "This field is required.")
		case n > limit:
			v.Add(field, fmt.Sprintf("The text is too long: at most %d characters.", limit))
		}
	}
	text("notificationType", cmd.NotificationType, maxTypeLen, true)
	// The list's notificationTypes filter trims each type it is given and
	// refuses control characters: a type with either could be sent and
	// never found.
	if t := cmd.NotificationType; len(v["notificationType"]) == 0 && (strings.TrimSpace(t) != t || strings.ContainsFunc(t, unicode.IsControl)) {
		v.Add("notificationType", "The type must not contain control characters or begin or end with spaces.")
	}
	text("subject", cmd.Subject, maxSubjectLen, false)
	text("message", cmd.Message, maxMessageLen, false)
	if d := bytes.TrimSpace(cmd.Data); len(d) == 0 || bytes.Equal(d, []byte("null")) {
		cmd.Data = nil
	} else if len(d) > maxDataBytes {
		v.Add("data", "The data is too large: at most 16 KiB.")
	} else if d[0] != '{' || !json.Valid(d) {
		v.Add("data", "The data must be a JSON object.")
	} else if problems := storable.Check(d); len(problems) > 0 {
		// The raw bytes: over NATS nothing checked them before.
		v.Add("data", problems[0].Message)
	} else {
		checkData(d, v)
		cmd.Data = d
	}
	return v.Err()
}
