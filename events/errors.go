package events

import "errors"

var (
	// ErrUnknownType is an event type this build does not know.
	ErrUnknownType = errors.New("unknown event type")
	// ErrUnknownVersion is a payload version newer than this build knows.
	ErrUnknownVersion = errors.New("unknown event version")
)
