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
// name, case-sensitive, left for upstreamID.
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

// upstreamID is the UUID of an id an upstream service gives where the
// public document types it as uuid (a sender, a resource, data's taskId):
// the id lower-cased when it is a UUID, else its name-based UUID
// (events.UUIDFor), so that Astro is liberal in what it takes and exact in
// what it serves. It is applied here, where a request enters, once; the
// commands still take only UUIDs. An id it cannot name is returned as it
// came, for the command to refuse with its field.
func upstreamID(id string) string {
	if u, ok := events.UUIDFor(id); ok {
		return u
	}
	return id
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
