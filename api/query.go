package api

import (
	"net/url"
	"slices"
	"strings"

	"astro/commands"
)

// singleValued refuses a parameter that takes one value but came more than
// once with values that differ, as in ?$top=1&%24top=100000 or
// ?$top=1&$TOP=100000 (a known name in any case is that name, as flatQuery
// reads it). A handler reads the first; a proxy, a gateway or a validator
// in front may read another, and the request would be served as one
// nobody checked. The same value repeated is that value.
func singleValued(q url.Values, names ...string) error {
	v := commands.Validation{}
	for _, name := range names {
		var vs []string
		for k, kvs := range q {
			if queryName(k) == name {
				vs = append(vs, kvs...)
			}
		}
		for _, x := range vs {
			if x != vs[0] {
				v.Add(name, name+" was given more than once, with different values; give it once.")
				break
			}
		}
	}
	return v.Err()
}

// queryError refuses a query that does not parse: a pair with a raw ';'
// (no longer a separator since Go 1.17) or a bad percent escape. The
// url.Values handlers read drops such a pair without a word, and the read
// would answer a question the client did not ask: the whole list for a
// $filter, today's holiday for an asOf. A pair whose name parses is
// refused under that name (as a handler reads it), any other in the
// message.
func queryError(raw string) error {
	if _, err := url.ParseQuery(raw); err == nil {
		return nil
	}
	const (
		semicolon = "A ';' is not a separator: join parameters with '&', and write a ';' in a value as %3B."
		escape    = "A '%' must start an escape of two hex digits: write a '%' itself as %25."
	)
	v := commands.Validation{}
	var unnamed []string
	for _, pair := range strings.Split(raw, "&") {
		k, val, _ := strings.Cut(pair, "=")
		key, kerr := url.QueryUnescape(k)
		_, verr := url.QueryUnescape(val)
		msg := ""
		switch {
		case strings.Contains(pair, ";"):
			msg = semicolon
		case kerr != nil || verr != nil:
			msg = escape
		default:
			continue
		}
		if kerr != nil || key == "" || strings.Contains(k, ";") {
			if !slices.Contains(unnamed, msg) {
				unnamed = append(unnamed, msg)
			}
			continue
		}
		v.Add(queryName(flatName(key)), msg)
	}
	if len(unnamed) == 0 {
		return v.Err()
	}
	e := commands.Errorf(commands.EInvalid, "The query string does not parse: %s", strings.Join(unnamed, " "))
	if len(v) > 0 {
		e.Fields = v
	}
	return e
}

// queryNames are the query parameters of every endpoint, as handlers read
// them; flatQuery gives each its case here. A handler's new parameter
// belongs in this list (TestQueryNamesCoverTheDocument checks the
// document's). The bearer token's names are here for the stream to refuse
// them in any case.
var queryNames = func() map[string]string {
	m := map[string]string{}
	for _, name := range []string{
		"lastId", "senderId", "notificationTypes", "asFlatList",
		"$filter", "$orderby", "$top", "$skip", "asOf", "after",
		"ticket", "lastEventId", "access_token", "token", "authorization", "bearer",
	} {
		m[strings.ToLower(name)] = name
	}
	return m
}()

// queryName is the name a handler reads for the query key k: a known
// parameter's in its own case, any other key as it is.
func queryName(k string) string {
	if name, ok := queryNames[strings.ToLower(k)]; ok {
		return name
	}
	return k
}

// flatQuery rewrites the query parameters of nested forms to their plain
// names: params[asFlatList]=true to asFlatList=true, and an array's
// notificationTypes[]=a or params[notificationTypes][0]=a to
// notificationTypes=a. The public API's TypeScript SDK sends its options
// under "params", as its HTTP library serialises a nested object, and
// such libraries write arrays with brackets; read as they come, none of
// them would reach a handler.
//
// It also gives a known parameter its own case (queryNames): LastId,
// $TOP or $OrderBy would otherwise be ignored without a word, and a client
// would get an answer to a question it did not ask. A pair whose name
// does not parse is left as it is.
func flatQuery(raw string) string {
	if raw == "" {
		return raw
	}
	// Pair by pair, in order: an array's elements keep theirs, which a
	// map of values would not.
	var b strings.Builder
	changed := false
	for i, pair := range strings.Split(raw, "&") {
		k, v, hasValue := strings.Cut(pair, "=")
		if key, err := url.QueryUnescape(k); err == nil {
			if name := queryName(flatName(key)); name != key {
				changed, k = true, url.QueryEscape(name)
			}
		}
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(k)
		if hasValue {
			b.WriteString("=" + v)
		}
	}
	if !changed {
		return raw
	}
	return b.String()
}

// flatName is the plain name of a query key: "params[x]" is "x", and a
// trailing "[]" or "[3]" (an array's element) is dropped.
func flatName(k string) string {
	if inner, ok := strings.CutPrefix(k, "params["); ok {
		if i := strings.IndexByte(inner, ']'); i > 0 {
			k = inner[:i] + inner[i+1:]
		}
	}
	if i := strings.LastIndexByte(k, '['); i > 0 && strings.HasSuffix(k, "]") {
		if idx := k[i+1 : len(k)-1]; strings.Trim(idx, "0123456789") == "" {
			k = k[:i]
		}
	}
	return k
}
