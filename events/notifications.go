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

func (p NotificationRead) Target() string    { return p.NotificationID }
func (p NotificationUnread) Target() string  { return p.NotificationID }
func (p NotificationDeleted) Target() string { return p.NotificationID }

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

// InboxCompacted restates an inbox's whole pending state, so the events
// before it can be removed from the log: a compaction. A full inbox does
// not fit one message, so a compaction is Parts events appended in a row,
// each carrying some of the notifications; the first also lists every
// pending id, oldest first. Folded onto the history it replaces, each part
// changes nothing; folded onto an empty inbox (the history gone), the
// parts together rebuild it exactly.
type InboxCompacted struct {
	RecipientID     string                  `json:"recipientId"`
	CompactionID    string                  `json:"compactionId"`
	Part            int                     `json:"part"`  // 1-based
	Parts           int                     `json:"parts"` // how many events the compaction is
	NotificationIDs []string                `json:"notificationIds,omitempty"`
	Notifications   []CompactedNotification `json:"notifications"`
}

// CompactedNotification is one pending notification as a compaction
// carries it: its content and read state.
type CompactedNotification struct {
	NotificationID   string          `json:"notificationId"`
	SenderID         string          `json:"senderId"`
	NotificationType string          `json:"notificationType"`
	Subject          string          `json:"subject"`
	Message          string          `json:"message"`
	Data             json.RawMessage `json:"data,omitempty"`
	CreateDate       time.Time       `json:"createDate"`
	ReadDate         *time.Time      `json:"readDate,omitempty"`
	// Seq is where the notification was delivered in the log: its place
	// in the inbox's order, kept across compactions.
	Seq uint64 `json:"seq"`
}

// InboxErased: every notification of the inbox was erased on request, and
// every event before this one removed from the log. It names no content
// and no one but the inbox it is about (its subject): who asked is the
// event's actor.
type InboxErased struct {
	ErasureID     string `json:"erasureId"`
	Notifications int    `json:"notifications"` // how many were pending
}

func (InboxCompacted) EventType() string { return "InboxCompacted" }
func (InboxErased) EventType() string    { return "InboxErased" }

func (InboxCompacted) EventVersion() int { return 1 }
func (InboxErased) EventVersion() int    { return 1 }
