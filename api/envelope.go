package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"astro/commands"
	"astro/query"
)

// Envelope is the body of every response (spec 2.1).
type Envelope struct {
	Success    bool        `json:"success"`
	HasError   bool        `json:"hasError"`
	StatusCode string      `json:"statusCode"`
	Data       any         `json:"data,omitempty"`
	Error      *AstroError `json:"error,omitempty"`
}

// AstroError describes a failed call (spec 2.3).
type AstroError struct {
	Message          string              `json:"message"`
	TechnicalError   string              `json:"technicalError,omitempty"`
	AdditionalErrors []string            `json:"additionalErrors,omitempty"`
	ValidationErrors map[string][]string `json:"validationErrors,omitempty"`
}

// statusNames are the statusCode values of spec 2.2.
var statusNames = map[int]string{
	100: "Continue", 101: "SwitchingProtocols", 102: "Processing", 103: "EarlyHints",
	200: "OK", 201: "Created", 202: "Accepted", 203: "NonAuthoritativeInformation", 204: "NoContent",
	205: "ResetContent", 206: "PartialContent", 207: "MultiStatus", 208: "AlreadyReported", 226: "IMUsed",
	300: "MultipleChoices", 301: "MovedPermanently", 302: "Found", 303: "SeeOther", 304: "NotModified",
	305: "UseProxy", 306: "Unused", 307: "TemporaryRedirect", 308: "PermanentRedirect",
	400: "BadRequest", 401: "Unauthorized", 402: "PaymentRequired", 403: "Forbidden", 404: "NotFound",
	405: "MethodNotAllowed", 406: "NotAcceptable", 407: "ProxyAuthenticationRequired", 408: "RequestTimeout",
	409: "Conflict", 410: "Gone", 411: "LengthRequired", 412: "PreconditionFailed", 413: "RequestEntityTooLarge",
	414: "RequestUriTooLong", 415: "UnsupportedMediaType", 416: "RequestedRangeNotSatisfiable",
	417: "ExpectationFailed", 421: "MisdirectedRequest", 422: "UnprocessableEntity", 423: "Locked",
	424: "FailedDependency", 426: "UpgradeRequired", 428: "PreconditionRequired", 429: "TooManyRequests",
	431: "RequestHeaderFieldsTooLarge", 451: "UnavailableForLegalReasons",
	500: "InternalServerError", 501: "NotImplemented", 502: "BadGateway", 503: "ServiceUnavailable",
	504: "GatewayTimeout", 505: "HttpVersionNotSupported", 506: "VariantAlsoNegotiates",
	507: "InsufficientStorage", 508: "LoopDetected", 510: "NotExtended", 511: "NetworkAuthenticationRequired",
}

// StatusName is the spec 2.2 name of an HTTP status.
func StatusName(status int) string { return statusNames[status] }

// statusOf is the one mapping from application error codes to HTTP.
func statusOf(code string) int {
	switch code {
	case commands.EInvalid:
		return http.StatusBadRequest
	case commands.EUnauthorized:
		return http.StatusUnauthorized
	case commands.EForbidden:
		return http.StatusForbidden
	case commands.ENotFound:
		return http.StatusNotFound
	case commands.EMethod:
		return http.StatusMethodNotAllowed
	case commands.EConflict:
		return http.StatusConflict
	case commands.ETooLarge:
		return http.StatusRequestEntityTooLarge
	case commands.EHeaderTooLarge:
		return http.StatusRequestHeaderFieldsTooLarge
	case commands.EMediaType:
		return http.StatusUnsupportedMediaType
	case commands.EUnprocessable:
		return http.StatusUnprocessableEntity
	case commands.ETooManyRequests:
		return http.StatusTooManyRequests
	case commands.EUnavailable:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// writeJSON answers env with its length: one written straight to the
// connection goes out chunked past 2 KiB (net/http's buffer), as a
// holiday's answer with its resources does.
func writeJSON(w http.ResponseWriter, status int, env Envelope) {
	env.StatusCode = StatusName(status)
	body, err := json.Marshal(env)
	if err != nil {
		status, env = ErrorEnvelope(err, w.Header().Get("X-Request-Id"))
		body, _ = json.Marshal(env)
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body) // the client went away; nothing to do
}

func writeOK(w http.ResponseWriter, data any) {
	writeJSON(w, http.StatusOK, Envelope{Success: true, Data: data})
}

// ErrorEnvelope is the envelope and HTTP status of a failure. Only an
// application error's message reaches the client; a 500 says nothing of its
// cause, and the request id lets the client quote it.
func ErrorEnvelope(err error, requestID string) (int, Envelope) {
	var e *commands.Error
	switch {
	case errors.As(err, &e):
	case query.Unreachable(err):
		e = &commands.Error{Code: commands.EUnavailable, Message: "The service is temporarily unavailable; try again.", Err: err}
	default:
		e = &commands.Error{Code: commands.EInternal, Err: err}
	}
	status := statusOf(e.Code)
	msg := e.Message
	if status == http.StatusInternalServerError || msg == "" {
		msg = "Something went wrong on our side; try again later."
	}
	return status, Envelope{HasError: true, StatusCode: StatusName(status), Error: &AstroError{
		Message:          msg,
		TechnicalError:   e.Code + "; request " + requestID,
		ValidationErrors: e.Fields,
	}}
}

// ErrCutOff is the cause with which a server cancels the requests still
// running when its shutdown grace is up: they end unanswered, as when the
// client goes away, but the service's stop is what ended them.
var ErrCutOff = errors.New("the service stopped before the request was answered")

// writeError answers err in the envelope and logs its cause, unless log
// is nil.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reqID := w.Header().Get("X-Request-Id")
	switch ctxErr := r.Context().Err(); {
	case errors.Is(context.Cause(r.Context()), ErrCutOff):
		log.Warn("request cut off", "method", r.Method, "path", r.URL.Path, "request_id", reqID, "err", err)
		// Not even the empty 200 net/http sends for a handler that wrote
		// nothing, which a client would take for the answer: the
		// connection closes, and the client knows it has none.
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
		return
	case errors.Is(ctxErr, context.Canceled) && !errors.Is(err, errBodyTimeout):
		// net/http cancels a request's context when its client goes away:
		// nobody reads an answer, and whatever error the cancelled work
		// came back with is not a failure of ours.
		log.Info("client disconnected", "method", r.Method, "path", r.URL.Path, "request_id", reqID, "err", err)
		return
	case errors.Is(ctxErr, context.DeadlineExceeded) && commands.ErrorCode(err) == commands.EInternal:
		// What failed did so because the request's time was up (a query
		// cancelled, a retry given up): a 503 to retry, not a bug.
		err = &commands.Error{Code: commands.EUnavailable, Message: "The request took longer than its deadline; try again.", Err: err}
	}
	status, env := ErrorEnvelope(err, reqID)
	lvl := slog.LevelDebug
	switch {
	case errors.Is(err, errBodyTimeout):
		lvl = slog.LevelInfo // a slow client's, not the service's: nothing to page for
	case status >= 500:
		lvl = slog.LevelError
	}
	log.Log(r.Context(), lvl, "request failed", "method", r.Method, "path", r.URL.Path, "status", status, "request_id", reqID, "err", err)
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="astro"`)
	}
	if status == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" {
		// Whatever is down, a client that waits a moment and retries (with
		// its Idempotency-Key) does the right thing; without the header
		// some retry at once, or never.
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, env)
}
