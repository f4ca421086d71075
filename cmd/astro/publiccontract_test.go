package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
)

// publicDocument is the public API's own OpenAPI document, the one its
// typed SDKs are generated from (the operations Astro serves). It lives
// beside the repository, in ../shared, where CI clones it too.
var publicDocument = filepath.Join("..", "..", "..", "shared", "spec", "public-openapi-extract.json")

// newPublicContract builds the validator of the answers to the public
// document's operations. A strict generated client rejects what the
// document does not allow, formats included, so formats are asserted,
// int32 among them (the JSON Schema vocabulary has no such format). The
// document declares only the 200 of each operation; the SDKs read any
// other answer as AstroResult, so that is added as each operation's
// default answer.
func newPublicContract() (validator.Validator, error) {
	raw, err := os.ReadFile(publicDocument)
	if err != nil {
		return nil, fmt.Errorf("the public API document: %w", err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("the public API document: %w", err)
	}
	paths, _ := doc["paths"].(map[string]any)
	if len(paths) == 0 {
		return nil, errors.New("the public API document has no paths")
	}
	for _, item := range paths {
		for _, op := range item.(map[string]any) {
			responses := op.(map[string]any)["responses"].(map[string]any)
			responses["default"] = map[string]any{
				"description": "Any other answer: AstroResult, as the SDKs read it.",
				"content": map[string]any{"application/json": map[string]any{
					"schema": map[string]any{"$ref": "#/components/schemas/AstroResult"},
				}},
			}
		}
	}
	// NotificationDto's children are NotificationDtos: a cycle the
	// validator cannot render. Astro groups one level deep, so a child is
	// checked as a NotificationDto whose own children hold nothing.
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	var child map[string]any
	if err := json.Unmarshal(mustJSON(schemas["NotificationDto"]), &child); err != nil {
		return nil, err
	}
	child["properties"].(map[string]any)["children"].(map[string]any)["items"] = map[string]any{"not": map[string]any{}}
	schemas["NotificationChildDto"] = child
	schemas["NotificationDto"].(map[string]any)["properties"].(map[string]any)["children"].(map[string]any)["items"] =
		map[string]any{"$ref": "#/components/schemas/NotificationChildDto"}
	raw, err = json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	d, err := libopenapi.NewDocument(raw)
	if err != nil {
		return nil, err
	}
	v, errs := validator.NewValidator(d, config.WithFormatAssertions(),
		config.WithCustomFormat("int32", integerFormat(math.MinInt32, math.MaxInt32)),
		config.WithCustomFormat("int64", integerFormat(math.MinInt64, math.MaxInt64)))
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		return nil, fmt.Errorf("the public API document is not valid OpenAPI: %s", describeValidation(verrs))
	}
	return v, nil
}

// integerFormat checks that a whole number fits [lo, hi].
func integerFormat(lo, hi float64) func(any) error {
	return func(v any) error {
		var f float64
		switch n := v.(type) {
		case json.Number:
			var err error
			if f, err = n.Float64(); err != nil {
				return err
			}
		case float64:
			f = n
		case int:
			f = float64(n)
		case int64:
			f = float64(n)
		default:
			return nil // not a number: the type keyword says so
		}
		if f != math.Trunc(f) || f < lo || f > hi {
			return fmt.Errorf("%v is out of range [%.0f, %.0f]", v, lo, hi)
		}
		return nil
	}
}

// checkPublic returns what in the answer to one of the public document's
// operations breaks that document; nothing for other requests.
func (c *contract) checkPublic(rq *http.Request, rs *http.Response) []string {
	ok, errs := c.public.ValidateHttpResponse(rq, rs)
	if ok {
		return nil
	}
	for _, e := range errs {
		if e.IsPathMissingError() || e.IsOperationMissingError() {
			return nil // not an operation of the public document
		}
	}
	return []string{"public API document (" + publicDocument + "): " + describeValidation(errs)}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // a value decoded from JSON always encodes
	}
	return b
}

// TestPublicContractCatches: the harness holds answers to the public
// document, formats included; each answer here is one Astro gave before
// (or one a regression would give), and each must be caught.
func TestPublicContractCatches(t *testing.T) {
	c, err := loadContract()
	if err != nil {
		t.Fatal(err)
	}
	const id = "0193a6a2-7c5e-7000-8000-000000000000"
	const sender = "0000b0b0-0000-4000-8000-000000000001"
	notification := func(senderID, data string) string {
		return `{"success":true,"hasError":false,"statusCode":"OK","data":{"items":[{"id":"` + id + `","senderId":"` + senderID +
			`","children":null,"notificationType":"t","createDate":"2027-01-01T00:00:00Z","subject":"s","message":"m","readDate":null,"data":` +
			data + `}],"totalCount":1,"unreadCount":1}}`
	}
	for _, tc := range []struct {
		name, method, path, body string
		breaks                   bool
	}{
		{"a valid page", "GET", "/api/data/notifications", notification(sender, `{"taskId":"`+id+`"}`), false},
		{"data taskId a number", "GET", "/api/data/notifications", notification(sender, `{"taskId":42}`), true},
		{"data taskId not a uuid", "GET", "/api/data/notifications", notification(sender, `{"taskId":"42"}`), true},
		{"data with an unknown field", "GET", "/api/data/notifications", notification(sender, `{"marker":"m"}`), true},
		{"data null", "GET", "/api/data/notifications", notification(sender, `null`), true},
		{"sender not a uuid", "GET", "/api/data/notifications", notification("bob", `{}`), true},
		{"mark unread with a timestamp", "POST", "/api/data/notifications/" + id + "/markunread",
			`{"success":true,"hasError":false,"statusCode":"OK","data":{"timestamp":"2027-01-01T00:00:00Z"}}`, true},
		{"mark unread without data", "POST", "/api/data/notifications/" + id + "/markunread",
			`{"success":true,"hasError":false,"statusCode":"OK"}`, false},
		{"countryId alpha-2", "GET", "/api/data/holidays/country",
			`{"success":true,"hasError":false,"statusCode":"OK","data":[{"id":"` + id + `","date":"2027-12-26","countryId":"GB","countryName":"United Kingdom"}]}`, true},
		{"countryId beyond int32", "GET", "/api/data/holidays/country",
			`{"success":true,"hasError":false,"statusCode":"OK","data":[{"id":"` + id + `","date":"2027-12-26","countryId":4294967296,"countryName":"United Kingdom"}]}`, true},
		{"count beyond int32", "GET", "/api/data/notifications/unreadcount",
			`{"success":true,"hasError":false,"statusCode":"OK","data":{"unreadCount":2147483648}}`, true},
		{"an error answer is AstroResult", "GET", "/api/data/notifications/unreadcount",
			`{"success":false,"hasError":true,"statusCode":"Unauthorized","error":{"message":"no"}}`, false},
		{"an error answer with data", "GET", "/api/data/notifications/unreadcount",
			`{"success":false,"hasError":true,"statusCode":"Unauthorized","error":{"message":"no"},"data":{}}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, "http://astro"+tc.path, nil)
			status := 200
			if strings.Contains(tc.body, `"hasError":true`) {
				status = 401
			}
			resp := &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}},
				Body: io.NopCloser(strings.NewReader(tc.body)), Request: req}
			c.mu.Lock()
			problems := c.checkPublic(req, resp)
			c.mu.Unlock()
			if got := len(problems) > 0; got != tc.breaks {
				t.Fatalf("breaks = %v, want %v: %v", got, tc.breaks, problems)
			}
		})
	}
}
