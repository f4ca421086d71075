package api

import (
	"net/http"
	"strings"

	"astro/events"
)

// normalIDs lowercases the UUIDs among the segments of a holiday,
// notification or resource path, once, before routing: ids are handed out
// in lower case and name log subjects and rows as such, and an upper-case
// copy must reach the same thing everywhere (it used to work on GET and PUT
// and 404 on /history and ?asOf=). A resource id that is no UUID is a
// name, case-sensitive, left for events.UpstreamID.
func normalIDs(path string) string {
	if !strings.HasPrefix(path, "/api/data/holidays/") && !strings.HasPrefix(path, "/api/data/notifications/") && !strings.HasPrefix(path, "/api/data/resources/") {
		return path
	}
	segs := strings.Split(path, "/")
	changed := false
	for i, seg := range segs {
		if events.ValidUUID(seg) && seg != strings.ToLower(seg) {
			segs[i], changed = strings.ToLower(seg), true
		}
	}
	if !changed {
		return path
	}
	return strings.Join(segs, "/")
}

// headerBytes is about what the request line and headers took on the wire.
func headerBytes(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}
