// Package notifications decides every command on a user's notifications.
// A user's inbox is the aggregate: sending, reading, deleting and the bulk
// operations of one user are all decided against it, so the cap of
// MaxPending pending notifications and racing deletes are settled in one
// place, and each command costs the same whatever the inbox's history.
package notifications
