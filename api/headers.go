package api

import (
	"strings"

	"astro/commands"
)

// singletonHeaders are the request header fields Astro reads one value of
// (RFC 9110 5.3: a field that is not a list must not come twice).
var singletonHeaders = []string{"Authorization", "Idempotency-Key", "Content-Type", HeaderMinPosition, "X-Integration-Name"}

// SingleHeader is the value of header field name in h, its names matched
// in any case: NATS keeps the case clients write, so "authorization" and
// "Authorization" are two keys of one field there. A field given more than
// once with values that differ is refused: Astro would read one of them (a
// map's order decides which over NATS) while a proxy or gateway in front
// may have checked another, as two Authorization headers of two users. The
// same value repeated is that value. A comma-separated list is one value.
func SingleHeader(h map[string][]string, name string) (string, error) {
	vs := headerValues(h, name)
	if len(vs) == 0 {
		return "", nil
	}
	for _, v := range vs[1:] {
		if v != vs[0] {
			return "", commands.Invalid(map[string][]string{name: {givenTwice(name)}})
		}
	}
	return vs[0], nil
}

// HeaderSent reports whether h holds name, in any case, even empty.
func HeaderSent(h map[string][]string, name string) bool { return len(headerValues(h, name)) > 0 }

// headerValues is every value of name in h, whatever the case of its key.
func headerValues(h map[string][]string, name string) []string {
	var vs []string
	for k, kvs := range h {
		if strings.EqualFold(k, name) {
			vs = append(vs, kvs...)
		}
	}
	return vs
}

// headerError refuses every singleton header of h given more than once
// with values that differ.
func headerError(h map[string][]string) error {
	v := commands.Validation{}
	for _, name := range singletonHeaders {
		if _, err := SingleHeader(h, name); err != nil {
			v.Add(name, givenTwice(name))
		}
	}
	return v.Err()
}

func givenTwice(name string) string {
	return name + " was given more than once, with different values; send it once."
}
