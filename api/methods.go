package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// methodTable knows the methods of every path the OpenAPI document
// describes. The router cannot say it: httprouter v1 allows no static
// segment beside a parameter, so /notifications/unreadcount is served by a
// GET /notifications/:name route, and a POST there reaches POST
// /notifications/:name (for markallread) rather than a 405. The document is
// the list of paths the contract tests hold the server to, so it is also
// the one place that says which methods a path has.
type methodTable []pathMethods

type pathMethods struct {
	segments []string // "" stands for a {parameter}
	methods  []string
}

func newMethodTable(doc []byte) (methodTable, error) {
	var d struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("read the paths of the OpenAPI document: %w", err)
	}
	var t methodTable
	for path, ops := range d.Paths {
		pm := pathMethods{}
		for _, seg := range strings.Split(strings.Trim(path, "/"), "/") {
			if strings.HasPrefix(seg, "{") {
				seg = ""
			}
			pm.segments = append(pm.segments, seg)
		}
		for m := range ops {
			switch m = strings.ToUpper(m); m {
			case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodHead:
				pm.methods = append(pm.methods, m)
			}
		}
		// RFC 9110 (9.3.2): HEAD is served wherever GET is, as GET without
		// content (see Server.serve); the document lists GET alone.
		if slices.Contains(pm.methods, http.MethodGet) {
			pm.methods = append(pm.methods, http.MethodHead)
		}
		t = append(t, pm)
	}
	return t, nil
}

// allowed returns the methods of path, sorted, or nil when the document
// has no such path. As OpenAPI matches, a concrete path wins over a
// templated one: /holidays/global is that list, not the holiday {id}
// "global" (which, not being a uuid, could not be one).
func (t methodTable) allowed(path string) []string {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	var allow []string
	fewest := len(segs) + 1 // parameters of the paths in allow
	for _, pm := range t {
		if len(pm.segments) != len(segs) {
			continue
		}
		params := 0
		for i, s := range pm.segments {
			switch {
			case s == "" && segs[i] != "": // a parameter takes any segment but an empty one
				params++
			case s == "" || s != segs[i]:
				params = -1
			}
			if params < 0 {
				break
			}
		}
		switch {
		case params < 0 || params > fewest:
		case params < fewest:
			allow, fewest = slices.Clone(pm.methods), params
		default:
			allow = append(allow, pm.methods...)
		}
	}
	slices.Sort(allow)
	return slices.Compact(allow)
}
