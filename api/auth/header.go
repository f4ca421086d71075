package auth

import "strings"

// ows is HTTP's optional white space.
const ows = " \t"

// FromHeader extracts the token from an Authorization header value of the
// form "Bearer <token>". The scheme is matched case-insensitively (RFC 9110
// says schemes are case-insensitive) and surrounding optional white space
// (space and tab, RFC 9110 OWS; not Unicode spaces, which no client sends)
// is tolerated. Errors wrap ErrUnauthorized.
func FromHeader(h string) (string, error) {
	h = strings.Trim(h, ows)
	if h == "" {
		return "", unauthorized(reasonMissingHeader, nil)
	}
	i := strings.IndexAny(h, " \t")
	if i < 0 {
		if strings.EqualFold(h, "Bearer") {
			return "", unauthorized(reasonMissingToken, nil)
		}
		return "", unauthorized(reasonScheme, nil)
	}
	if !strings.EqualFold(h[:i], "Bearer") {
		return "", unauthorized(reasonScheme, nil)
	}
	tok := strings.Trim(h[i+1:], ows)
	if tok == "" {
		return "", unauthorized(reasonMissingToken, nil)
	}
	// A JWT has no whitespace; anything after a second space is not one
	// token, and guessing which part was meant would hide client bugs.
	if strings.ContainsAny(tok, " \t") {
		return "", unauthorized(reasonMalformedHeader, nil)
	}
	return tok, nil
}
