package api

import (
	"net/url"
	"strings"
)

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
	q, err := url.ParseQuery(raw)
	if err != nil {
		return raw
	}
	changed := false
	flat := make(url.Values, len(q))
	for k, vs := range q {
		name := flatName(k)
		changed = changed || name != k
		flat[name] = append(flat[name], vs...)
	}
	if !changed {
		return raw
	}
	return flat.Encode()
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
