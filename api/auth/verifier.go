package auth

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
)

// maxTokenLen refuses oversized tokens before any decoding work; real
// tokens are well under 4 KiB.
const maxTokenLen = 16 << 10

// Verifier checks bearer tokens. It is safe for concurrent use.
type Verifier struct {
	parser   *jwt.Parser
	algs     []string // every alg some configured source may verify
	secret   []byte   // nil without an HS256 source
	jwks     keyfunc.Keyfunc
	issuer   string
	audience string
	log      *slog.Logger
	// hsOnly is the key function when there is no JWKS; built once so the
	// common development path allocates no closure per request.
	hsOnly jwt.Keyfunc
}

// NewVerifier builds a Verifier from cfg. With a JWKSURL it fetches the key
// set once before returning, so a wrong URL fails startup rather than every
// request, then refreshes it in the background until ctx ends.
func NewVerifier(ctx context.Context, cfg Config) (*Verifier, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	v := &Verifier{issuer: cfg.Issuer, audience: cfg.Audience, log: log}
	if len(cfg.HS256Secret) > 0 {
		// Copied so a caller reusing its buffer cannot change our key.
		v.secret = bytes.Clone(cfg.HS256Secret)
		v.algs = append(v.algs, jwt.SigningMethodHS256.Alg())
	}
	if cfg.JWKSURL != "" {
		kf, err := newJWKS(ctx, cfg, log)
		if err != nil {
			return nil, err
		}
		v.jwks = kf
		v.algs = append(v.algs, asymmetricAlgs()...)
	}
	v.hsOnly = func(t *jwt.Token) (any, error) { return v.key(context.Background(), t) }

	opts := []jwt.ParserOption{
		// Redundant with key(), which already refuses algs its source does not
		// allow; kept so the library refuses them too if key() ever regresses.
		jwt.WithValidMethods(v.algs),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(cfg.leeway()),
		jwt.WithTimeFunc(now),
		// Non-canonical base64 would let one token have many spellings.
		jwt.WithStrictDecoding(),
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	v.parser = jwt.NewParser(opts...)
	return v, nil
}

// asymmetricAlgs are the algorithms JWKS keys may verify.
func asymmetricAlgs() []string {
	return []string{"RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "ES512"}
}

// Verify checks token's signature, algorithm, times, issuer, audience and
// identity claims. Every error wraps ErrUnauthorized; Reason(err) is safe to
// return to the client. ctx bounds a JWKS refresh triggered by an unknown
// kid.
func (v *Verifier) Verify(ctx context.Context, token string) (Claims, error) {
	if v == nil || v.parser == nil {
		// A zero Verifier must refuse, not panic mid-request or, worse, accept.
		return Claims{}, unauthorized(reasonInvalid, errors.New("auth: Verifier not built by NewVerifier"))
	}
	if err := checkSyntax(token); err != nil {
		return Claims{}, err
	}
	kf := v.hsOnly
	if v.jwks != nil {
		kf = func(t *jwt.Token) (any, error) { return v.key(ctx, t) }
	}
	var wc wireClaims
	tok, err := v.parser.ParseWithClaims(token, &wc, kf)
	if err != nil {
		reason := v.reason(tok, &wc, err)
		v.log.DebugContext(ctx, "auth: token refused", "reason", reason, "err", err)
		return Claims{}, unauthorized(reason, err)
	}
	if err := numericTimes(token); err != nil {
		return Claims{}, unauthorized(reasonBadClaims, err)
	}
	switch {
	case wc.Subject == "":
		return Claims{}, unauthorized(reasonMissingSub, nil)
	case !validID(wc.Subject):
		return Claims{}, unauthorized(reasonBadSub, nil)
	case wc.WorkspaceID == "":
		return Claims{}, unauthorized(reasonMissingWS, nil)
	case !validID(wc.WorkspaceID):
		return Claims{}, unauthorized(reasonBadWS, nil)
	}
	c := Claims{
		UserID:      wc.Subject,
		WorkspaceID: wc.WorkspaceID,
		Scopes:      strings.Fields(wc.Scope),
		Issuer:      wc.Issuer,
		Audience:    wc.Audience,
		ID:          wc.ID,
		ExpiresAt:   wc.ExpiresAt.Time, // non-nil: WithExpirationRequired
	}
	if wc.IssuedAt != nil {
		c.IssuedAt = wc.IssuedAt.Time
	}
	return c, nil
}

// key picks the verification key from the source that owns the token's
// algorithm. The header's alg never chooses the kind of key: HS256 gets
// the secret or nothing, asymmetric algs get JWKS keys or nothing. That is
// what stops the classic attack of HMAC-signing a token with a public key.
func (v *Verifier) key(ctx context.Context, t *jwt.Token) (any, error) {
	// RFC 7515 §4.1.11: extensions listed in crit must be understood, and we
	// understand none.
	if _, ok := t.Header["crit"]; ok {
		return nil, unauthorized(reasonCritical, nil)
	}
	alg := t.Method.Alg()
	switch {
	case alg == jwt.SigningMethodHS256.Alg() && v.secret != nil:
		return v.secret, nil
	case v.jwks != nil && slices.Contains(asymmetricAlgs(), alg):
		k, err := v.jwks.KeyfuncCtx(ctx)(t)
		if err != nil {
			return nil, unauthorized(reasonUnknownKey, err)
		}
		return k, nil
	default:
		return nil, unauthorized(reasonAlgorithm, nil)
	}
}

// reason maps a parser failure to a fixed, client-safe reason. Order
// matters where the library joins several failures: structure first, then
// algorithm and signature (a forged token learns nothing about its
// claims), then claims.
func (v *Verifier) reason(tok *jwt.Token, wc *wireClaims, err error) string {
	var ae *authError
	switch {
	case errors.As(err, &ae):
		return ae.reason
	case errors.Is(err, jwt.ErrTokenMalformed), tok == nil:
		return reasonMalformed
	case !v.algAllowed(tok):
		return reasonAlgorithm
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return reasonSignature
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		switch {
		case wc.ExpiresAt == nil:
			return reasonMissingExp
		case v.issuer != "" && wc.Issuer == "":
			return reasonMissingIss
		case v.audience != "" && len(wc.Audience) == 0:
			return reasonMissingAud
		}
		return reasonBadClaims
	case errors.Is(err, jwt.ErrTokenExpired):
		return reasonExpired
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return reasonNotYetValid
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return reasonIssuedFuture
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return reasonIssuer
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return reasonAudience
	case errors.Is(err, jwt.ErrTokenInvalidClaims):
		return reasonBadClaims
	default:
		return reasonInvalid
	}
}

func (v *Verifier) algAllowed(tok *jwt.Token) bool {
	alg, _ := tok.Header["alg"].(string)
	return slices.Contains(v.algs, alg)
}

// checkSyntax refuses what cannot be a compact JWS before any decoding.
// Besides saving work, the closed alphabet matters for correctness: Go's
// base64 decoder skips CR and LF even in strict mode, so without this a
// token with a newline spliced into its signature would still verify,
// giving one token many spellings.
func checkSyntax(s string) error {
	if s == "" {
		return unauthorized(reasonMissingToken, nil)
	}
	if len(s) > maxTokenLen {
		return unauthorized(reasonTooLarge, nil)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return unauthorized(reasonMalformed, nil)
		}
	}
	return nil
}

// numericTimes refuses a token whose exp, nbf or iat is not a JSON number
// (RFC 7519 §2, NumericDate). The JWT library also reads a string holding
// a number, so "exp":"9999999999" would pass; one claim, one spelling.
// Called after the signature is verified, so the payload is well formed.
func numericTimes(token string) error {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return errors.New("not a compact JWS")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return fmt.Errorf("payload: %w", err)
	}
	var claims map[string]json.RawMessage
	if err := json.Unmarshal(payload, &claims); err != nil {
		return fmt.Errorf("payload: %w", err)
	}
	for _, name := range []string{"exp", "nbf", "iat"} {
		raw, ok := claims[name]
		if !ok {
			continue
		}
		if raw = bytes.TrimSpace(raw); len(raw) == 0 || !(raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9') {
			return fmt.Errorf("claim %s is not a number: %.40s", name, raw)
		}
	}
	return nil
}
