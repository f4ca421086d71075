package events_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"

	"astro/events"
	"astro/events/natslog"
)

// TestAsyncAPI holds events/asyncapi.yaml to the code: it parses, every
// event type at every version is a message whose headers and payload name
// its schema, and every reference resolves.
func TestAsyncAPI(t *testing.T) {
	raw, err := os.ReadFile("asyncapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("asyncapi.yaml does not parse: %v", err)
	}
	if doc["asyncapi"] != "3.0.0" {
		t.Fatalf("asyncapi %v, want 3.0.0", doc["asyncapi"])
	}
	messages := dig(t, doc, "components", "messages")

	// By the schema each message's payload refers to.
	bySchema := map[string]map[string]any{}
	for _, m := range messages {
		m := m.(map[string]any)
		if ref, ok := digOK(m, "payload", "schema", "$ref"); ok {
			bySchema[ref.(string)] = m
		}
	}
	for _, typ := range events.Types() {
		current, _ := events.CurrentVersion(typ)
		for v := 1; v <= current; v++ {
			file := "./schemas/" + typ + ".v" + strconv.Itoa(v) + ".json"
			m, ok := bySchema[file]
			if !ok {
				t.Errorf("%s v%d: no message with payload %s", typ, v, file)
				continue
			}
			if m["name"] != typ {
				t.Errorf("%s v%d: message name %v", typ, v, m["name"])
			}
			headers, _ := json.Marshal(m["headers"])
			for _, want := range []string{`"const":"` + typ + `"`, `"const":"` + natslog.DataSchema(typ, v) + `"`, "#/components/schemas/CloudEventsHeaders"} {
				if !strings.Contains(string(headers), want) {
					t.Errorf("%s v%d: headers lack %s: %s", typ, v, want, headers)
				}
			}
		}
	}

	// Every header Astro writes is described.
	ce := dig(t, doc, "components", "schemas", "CloudEventsHeaders", "properties")
	for _, h := range []string{"ce-specversion", "ce-id", "ce-source", "ce-type", "ce-subject", "ce-time", "ce-datacontenttype",
		"ce-dataschema", "ce-workspaceid", "ce-actorid", "ce-integrationname", "ce-correlationid", "ce-schemaversion", "Nats-Msg-Id",
		natslog.HeaderTraceParent, natslog.HeaderTraceState, "traceparent", "tracestate"} {
		if _, ok := ce[h]; !ok {
			t.Errorf("CloudEventsHeaders lacks %s", h)
		}
	}
	for schema, hs := range map[string][]string{
		"AppendHeaders":  {"Nats-Expected-Last-Subject-Sequence", "Nats-Msg-Id"},
		"ParkedHeaders":  {natslog.HeaderParkedReason, natslog.HeaderParkedSeq, natslog.HeaderParkedSubject},
		"CommandHeaders": {"x-integration-name", "Idempotency-Key"},
	} {
		props := dig(t, doc, "components", "schemas", schema, "properties")
		for _, h := range hs {
			if _, ok := props[h]; !ok {
				t.Errorf("%s lacks %s", schema, h)
			}
		}
	}

	// The channels are the subjects the code uses.
	var addresses []string
	for _, c := range dig(t, doc, "channels") {
		if a, ok := c.(map[string]any)["address"].(string); ok {
			addresses = append(addresses, a)
		}
	}
	for _, want := range []string{
		events.Subject("{workspaceId}", events.Aggregate{Kind: events.KindInbox, ID: "{userId}"}),
		events.Subject("{workspaceId}", events.Aggregate{Kind: events.KindHoliday, ID: "{holidayId}"}),
		events.Subject("{workspaceId}", events.Aggregate{Kind: events.KindResource, ID: "{resourceId}"}),
		natslog.ParkedSubject("{projector}"),
		"astro.commands.notifications.send",
	} {
		if !slices.Contains(addresses, want) {
			t.Errorf("no channel at %s (have %v)", want, addresses)
		}
	}

	// Every reference resolves: in the document, or a file beside it.
	walkRefs(doc, func(ref string) {
		file, pointer, _ := strings.Cut(ref, "#")
		target := doc
		if file != "" {
			target = nil // a fresh map: Unmarshal fills a non-nil one in place
			b, err := os.ReadFile(filepath.FromSlash(file))
			if err != nil {
				t.Errorf("$ref %s: %v", ref, err)
				return
			}
			if err := json.Unmarshal(b, &target); err != nil {
				t.Errorf("$ref %s: %v", ref, err)
				return
			}
		}
		if pointer == "" {
			return
		}
		if _, ok := digOK(target, strings.Split(strings.TrimPrefix(pointer, "/"), "/")...); !ok {
			t.Errorf("$ref %s does not resolve", ref)
		}
	})
}

func dig(t *testing.T, v map[string]any, path ...string) map[string]any {
	t.Helper()
	got, ok := digOK(v, path...)
	m, isMap := got.(map[string]any)
	if !ok || !isMap {
		t.Fatalf("asyncapi.yaml has no object at %s", strings.Join(path, "."))
	}
	return m
}

func digOK(v map[string]any, path ...string) (any, bool) {
	var cur any = v
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		p = strings.NewReplacer("~1", "/", "~0", "~").Replace(p)
		if cur, ok = m[p]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func walkRefs(v any, fn func(string)) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if s, ok := e.(string); ok && k == "$ref" {
				fn(s)
				continue
			}
			walkRefs(e, fn)
		}
	case []any:
		for _, e := range v {
			walkRefs(e, fn)
		}
	}
}
