package events

import (
	"embed"
	"strconv"
)

// schemaFiles are the JSON Schemas (draft 2020-12) of every event type at
// every version ever written, named <Type>.v<N>.json. They are the payload
// contract for downstream consumers (events/asyncapi.yaml refers to them),
// and each one's $id is the ce-dataschema its events carry. Old versions
// stay: the log keeps events of every version forever.
//
//go:embed schemas/*.json
var schemaFiles embed.FS

// Schema returns the JSON Schema of the payload of eventType at version,
// or false when there is none.
func Schema(eventType string, version int) ([]byte, bool) {
	b, err := schemaFiles.ReadFile("schemas/" + eventType + ".v" + strconv.Itoa(version) + ".json")
	if err != nil {
		return nil, false
	}
	return b, true
}

// CurrentVersion is the version new events of eventType are written with,
// or false for an unknown type. Consumers validating the log need it to
// know which schema versions to expect.
func CurrentVersion(eventType string) (int, bool) {
	newPayload, ok := registry[eventType]
	if !ok {
		return 0, false
	}
	return newPayload().EventVersion(), true
}
