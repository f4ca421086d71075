// Package auth owns who a request to Astro's public API is: it turns a
// bearer token into verified Claims (user, workspace, scopes) or a refusal
// that wraps ErrUnauthorized with a reason safe to show the caller.
//
// Keys come from one or both of two sources, and each source fixes the
// algorithms it may verify: a shared HS256 secret for development and
// simple deployments, and a remote JWKS (RSA and EC keys) for production.
// The algorithm named in a token's header only selects among the
// algorithms its source allows; it never picks the kind of key, so a token
// claiming HS256 is never checked against a public key and "none" never
// verifies.
//
// The package also mints development HS256 tokens (Sign) for the
// `astro token` command. It does not decide what a scope permits: callers
// check Claims.HasScope.
package auth
