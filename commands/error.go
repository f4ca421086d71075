package commands

import (
	"errors"
	"fmt"
	"slices"
)

// Error codes. The HTTP layer maps each to one status, in one place.
const (
	EInvalid         = "invalid"       // the request is malformed or fails validation
	EUnauthorized    = "unauthorized"  // no valid credentials
	EForbidden       = "forbidden"     // valid credentials, missing privilege
	ENotFound        = "not_found"     // unknown, deleted, or not the caller's
	EMethod          = "method"        // the route exists with another method
	EConflict        = "conflict"      // the aggregate kept changing under the command
	ETooLarge        = "too_large"     // body over the limit
	EHeaderTooLarge  = "headers_large" // URL and headers over the limit
	EMediaType       = "media_type"    // body is not JSON
	EUnprocessable   = "unprocessable" // well-formed but cannot be applied
	ETooManyRequests = "too_many"      // rate limited
	EUnavailable     = "unavailable"   // a dependency is down or too slow; retry
	EInternal        = "internal"      // a bug or an unexpected failure
)

// Error is the one application error. Message is written for end users;
// Fields holds per-field validation messages; Err is the internal cause,
// which is logged and never shown.
type Error struct {
	Code    string
	Message string
	Fields  map[string][]string
	Err     error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return e.Code + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf builds an Error with a user-facing message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Invalid builds a validation error from per-field messages.
func Invalid(fields map[string][]string) *Error {
	return &Error{Code: EInvalid, Message: "One or more fields are invalid.", Fields: fields}
}

// ErrorCode returns the code of the application error in err's chain, or
// EInternal for anything else: an error nobody classified is a bug.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EInternal
}

// Validation collects per-field problems of one request.
type Validation map[string][]string

// Add records msg for field, once: a check run on each element of a list
// (a query parameter's comma-separated values) must not answer one message
// per element, however many the caller sent.
func (v Validation) Add(field, msg string) {
	if !slices.Contains(v[field], msg) {
		v[field] = append(v[field], msg)
	}
}

// Err is nil when nothing was added.
func (v Validation) Err() error {
	if len(v) == 0 {
		return nil
	}
	return Invalid(v)
}
