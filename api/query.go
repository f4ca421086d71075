package api

import (
	"net/url"
	"strings"

	"astro/commands"
)

// singleValued refuses a parameter that takes one value but came more than
// once with values that differ, as in ?$top=1&%24top=100000. A handler
// reads the first; a proxy, a gateway or a validator in front may read
// another, and the request would be served as one nobody checked. The
// same value repeated is that value.
func singleValued(q url.Values, names ...string) error {
	v := commands.Validation{}
	for _, name := range names {
		if vs := q[name]; len(vs) > 1 {
			for _, x := range vs[1:] {
				if x != vs[0] {
					v.Add(name, name+" was given more than once, with different values; give it once.")
					break
				}
			}
		}
	}
	return v.Err()
}

// flatQuery rewrites the query parameters of nested forms to their plain
// names: params[asFlatList]=true to asFlatList=true, and an array's
// notificationTypes[]=a or params[notificationTypes][0]=a to
// notificationTypes=a. The public API's TypeScript SDK sends its options
// under "params", as its HTTP library serialises a nested object, and
// such libraries write arrays with brackets; read as they come, none of
// them would reach a handler. A query that does not parse is left as it
// is, for the handler to refuse.
func flatQuery(raw string) string {
	if !strings.Contains(raw, "[") && !strings.Contains(raw, "%5B") && !strings.Contains(raw, "%5b") {
		return raw
	}
	// Pair by pair, in order: an array's elements keep theirs, which a
	// map of values would not.
	var b strings.Builder
	changed := false
	for i, pair := range strings.Split(raw, "&") {
		k, v, hasValue := strings.Cut(pair, "=")
		key, err := url.QueryUnescape(k)
		if err != nil {
			return raw
		}
		if name := flatName(key); name != key {
			changed, k = true, url.QueryEscape(name)
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
