package auth

import "errors"

var (
	// ErrUnauthorized is wrapped by every refusal from Verify and FromHeader;
	// Reason gives the short explanation that goes with it.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrInvalidConfig is wrapped by Config.Validate and NewVerifier when the
	// configuration cannot work, so startup fails instead of every request.
	ErrInvalidConfig = errors.New("auth: invalid config")
)

// Reasons are fixed strings rather than library messages so that what
// reaches a client never carries key ids, URLs or parser internals.
const (
	reasonMissingHeader   = "missing authorization header"
	reasonScheme          = "unsupported authorization scheme"
	reasonMissingToken    = "missing bearer token"
	reasonMalformedHeader = "malformed authorization header"
	reasonTooLarge        = "token too large"
	reasonMalformed       = "malformed token"
	reasonAlgorithm       = "unsupported algorithm"
	reasonCritical        = "unsupported critical header"
	reasonUnknownKey      = "unknown signing key"
	reasonSignature       = "invalid signature"
	reasonExpired         = "token expired"
	reasonNotYetValid     = "token not valid yet"
	reasonIssuedFuture    = "token issued in the future"
	reasonIssuer          = "invalid issuer"
	reasonAudience        = "invalid audience"
	reasonMissingExp      = "missing exp claim"
	reasonMissingIss      = "missing iss claim"
	reasonMissingAud      = "missing aud claim"
	reasonBadClaims       = "invalid claims"
	reasonMissingSub      = "missing sub claim"
	reasonBadSub          = "invalid sub claim"
	reasonMissingWS       = "missing workspace_id claim"
	reasonBadWS           = "invalid workspace_id claim"
	reasonInvalid         = "invalid token"
)

// authError keeps the user-facing reason apart from the cause: Error()
// shows only the reason, while the cause stays reachable for logs and
// errors.Is without ever being rendered to a client by accident.
type authError struct {
	reason string
	cause  error
}

func (e *authError) Error() string { return ErrUnauthorized.Error() + ": " + e.reason }

func (e *authError) Unwrap() []error {
	if e.cause == nil {
		return []error{ErrUnauthorized}
	}
	return []error{ErrUnauthorized, e.cause}
}

func unauthorized(reason string, cause error) error {
	return &authError{reason: reason, cause: cause}
}

// Reason returns the short, client-safe explanation carried by an error
// from Verify or FromHeader ("token expired", "invalid signature", ...).
// It returns "unauthorized" for other errors wrapping ErrUnauthorized and
// "" for errors that do not.
func Reason(err error) string {
	var ae *authError
	if errors.As(err, &ae) {
		return ae.reason
	}
	if errors.Is(err, ErrUnauthorized) {
		return ErrUnauthorized.Error()
	}
	return ""
}
