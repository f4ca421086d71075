package events

import "errors"

var (
	// ErrUnknownType is an event type this build does not know.
	ErrUnknownType = errors.New("unknown event type")
	// ErrUnknownVersion is a payload version newer than this build knows.
	ErrUnknownVersion = errors.New("unknown event version")
	// ErrMalformed is a stored message that cannot be read as an event: no
	// event's headers, or data that is not its type's JSON. Unlike an
	// unknown type, which a newer build reads, no build reads it better.
	ErrMalformed = errors.New("malformed event message")

	// ErrConflict is an append refused because the aggregate's subject moved
	// past the expected sequence: another writer appended first.
	ErrConflict = errors.New("concurrent change")
	// ErrAlreadyAppended is an append whose event id was appended before: a
	// retried request whose first attempt got through. Nothing was appended
	// now.
	ErrAlreadyAppended = errors.New("events already appended")
	// ErrLogMoved is an append refused because its stream moved past the
	// position the writer expected it at (or its subject past the expected
	// sequence): something it has not seen came first. Nothing was
	// appended.
	ErrLogMoved = errors.New("log moved on")
)
