package events

import (
	"encoding/json"
	"time"
)

// Reasons a notification is deleted, carried by NotificationDeleted and
// AllNotificationsDeleted so consumers and audits can tell them apart.
const (
	ReasonUser     = "user"     // the recipient deleted it
	ReasonOverflow = "overflow" // the recipient went over MaxPending
	ReasonBulk     = "bulk"     // the recipient deleted all notifications
)

// NotificationSent: a notification was delivered to a recipient's inbox.
type NotificationSent struct {
	NotificationID   string          `json:"notificationId"`
	RecipientID      string          `json:"recipientId"`
	SenderID         string          `json:"senderId"`
	NotificationType string          `json:"notificationType"`
	Subject          string          `json:"subject"`
	Message          string          `json:"message"`
	Data             json.RawMessage `json:"data,omitempty"`
	CreateDate       time.Time       `json:"createDate"`
}

// NotificationRead: the recipient marked one notification read.
type NotificationRead struct {
	NotificationID string    `json:"notificationId"`
	RecipientID    string    `json:"recipientId"`
	ReadDate       time.Time `json:"readDate"`
}

// NotificationUnread: the recipient marked one notification unread again.
type NotificationUnread struct {
	NotificationID string `json:"notificationId"`
	RecipientID    string `json:"recipientId"`
}

// NotificationDeleted: one notification left the inbox, by the
// recipient's hand or by overflow.
type NotificationDeleted struct {
	NotificationID string `json:"notificationId"`
	RecipientID    string `json:"recipientId"`
	Reason         string `json:"reason"`
}

// AllNotificationsRead: every unread notification listed was marked read
// at once. The ids are explicit so a consumer needs no state to apply it.
type AllNotificationsRead struct {
	RecipientID     string    `json:"recipientId"`
	NotificationIDs []string  `json:"notificationIds"`
	ReadDate        time.Time `json:"readDate"`
}

// AllNotificationsDeleted: every pending notification listed was deleted
// at once.
type AllNotificationsDeleted struct {
	RecipientID     string   `json:"recipientId"`
	NotificationIDs []string `json:"notificationIds"`
	Reason          string   `json:"reason"`
}

func (NotificationSent) EventType() string        { return "NotificationSent" }
func (NotificationRead) EventType() string        { return "NotificationRead" }
func (NotificationUnread) EventType() string      { return "NotificationUnread" }
func (NotificationDeleted) EventType() string     { return "NotificationDeleted" }
func (AllNotificationsRead) EventType() string    { return "AllNotificationsRead" }
func (AllNotificationsDeleted) EventType() string { return "AllNotificationsDeleted" }

func (NotificationSent) EventVersion() int        { return 1 }
func (NotificationRead) EventVersion() int        { return 1 }
func (NotificationUnread) EventVersion() int      { return 1 }
func (NotificationDeleted) EventVersion() int     { return 1 }
func (AllNotificationsRead) EventVersion() int    { return 1 }
func (AllNotificationsDeleted) EventVersion() int { return 1 }
