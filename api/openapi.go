package api

import (
	_ "embed"
	"net/http"

	"github.com/julienschmidt/httprouter"
)

// OpenAPI is the HTTP contract: every endpoint, parameter, header, body and
// status this server answers with. The test suite checks every request and
// response against it.
//
//go:embed openapi.json
var OpenAPI []byte

func serveOpenAPI(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(OpenAPI)
}
