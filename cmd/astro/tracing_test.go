package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"astro/events/natslog"
)

// TestTracing follows one write through an in-memory exporter: the
// request's server span continues the caller's traceparent, the append is
// its child, the event carries the trace in its headers, and the projector
// batch that applied it continues the same trace and links the append.
func TestTracing(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	s := startService(t)
	s.stop() // this test's own instance, with the tracer, on the same log and database
	s = startWithConfig(t, s.env, func(cfg *Config) { cfg.TracerProvider = tp })

	// The caller's trace: a W3C traceparent as an upstream service sends it.
	const upstreamTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	s.call("POST", sendPath, sender(t, "w-trace"), map[string]any{"recipientId": "bob", "senderId": idOf("alice"),
		"notificationType": "x", "subject": "s", "message": "m"},
		"traceparent", "00-"+upstreamTrace+"-00f067aa0ba902b7-01").want(t, 200)

	var server, appendSpan, batch tracetest.SpanStub
	waitFor(t, 30*time.Second, func() error {
		for _, sp := range exp.GetSpans() {
			switch {
			case sp.Name == "POST /api/data/notifications" && sp.SpanKind == trace.SpanKindServer:
				server = sp
			case sp.Name == "append inbox" && sp.SpanKind == trace.SpanKindProducer:
				appendSpan = sp
			case sp.Name == "project notifications" && sp.SpanKind == trace.SpanKindConsumer:
				batch = sp
			}
		}
		if server.Name != "" && appendSpan.Name != "" && batch.Name != "" {
			return nil
		}
		return fmt.Errorf("spans: server %q, append %q, batch %q; all: %v", server.Name, appendSpan.Name, batch.Name, spanNames(exp.GetSpans()))
	})
	if got := server.SpanContext.TraceID().String(); got != upstreamTrace {
		t.Errorf("server span trace %s, want the caller's %s", got, upstreamTrace)
	}
	if appendSpan.Parent.SpanID() != server.SpanContext.SpanID() || appendSpan.SpanContext.TraceID() != server.SpanContext.TraceID() {
		t.Errorf("append span's parent %v, want the server span %v", appendSpan.Parent, server.SpanContext)
	}
	if batch.SpanContext.TraceID() != server.SpanContext.TraceID() || batch.Parent.SpanID() != appendSpan.SpanContext.SpanID() {
		t.Errorf("batch span in trace %s under %s, want trace %s under the append %s", batch.SpanContext.TraceID(),
			batch.Parent.SpanID(), server.SpanContext.TraceID(), appendSpan.SpanContext.SpanID())
	}
	linked := false
	for _, l := range batch.Links {
		linked = linked || l.SpanContext.SpanID() == appendSpan.SpanContext.SpanID()
	}
	if !linked {
		t.Errorf("batch span links %v, want the append span %s", batch.Links, appendSpan.SpanContext.SpanID())
	}

	// A downstream consumer finds the trace in the event's headers.
	var found bool
	for _, m := range s.logMessages(t) {
		if m.Header.Get("ce-type") != "NotificationSent" || m.Header.Get("ce-workspaceid") != "w-trace" {
			continue
		}
		found = true
		want := "00-" + upstreamTrace + "-" + appendSpan.SpanContext.SpanID().String() + "-01"
		for _, h := range []string{natslog.HeaderTraceParent, "traceparent"} {
			if got := m.Header.Get(h); got != want {
				t.Errorf("event header %s = %q, want %q", h, got, want)
			}
		}
		if sc := natslog.TraceContext(m.Header); sc.SpanID() != appendSpan.SpanContext.SpanID() {
			t.Errorf("TraceContext of the event = %v, want the append span", sc)
		}
	}
	if !found {
		t.Fatal("the event is not in the log")
	}

	// What a caller writes goes into its span bounded: the span is made
	// before any check, and lives until exported.
	long := "/" + strings.Repeat("é", 50_000)
	req, err := http.NewRequest("BREW", s.base+long, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	waitFor(t, 10*time.Second, func() error {
		for _, sp := range exp.GetSpans() {
			for _, a := range sp.Attributes {
				if a.Key == "url.path" && strings.HasPrefix(a.Value.AsString(), "/é") {
					return nil
				}
			}
		}
		return errors.New("no span of the long path yet")
	})
	for _, sp := range exp.GetSpans() {
		for _, a := range sp.Attributes {
			if a.Key == "url.path" && len(a.Value.AsString()) > 256 {
				t.Errorf("span %q holds a url.path of %d bytes", sp.Name, len(a.Value.AsString()))
			} else if a.Key == "url.path" && !utf8.ValidString(a.Value.AsString()) {
				t.Errorf("span %q holds a url.path cut inside a character", sp.Name)
			}
		}
		if strings.Contains(sp.Name, "BREW") {
			t.Errorf("a span is named after the caller's method: %q", sp.Name)
		}
	}
}

// TestTracingOffWithoutOTEL: tracing is off unless the OTEL_* variables
// ask for it, and refuses what Astro cannot export.
func TestTracingOffWithoutOTEL(t *testing.T) {
	for _, c := range []struct {
		env     map[string]string
		on      bool
		wantErr string
	}{
		{env: nil},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "none"}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: "OTLP only"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, wantErr: "http/protobuf only"},
	} {
		on, err := tracingFromEnv(func(k string) string { return c.env[k] })
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%v: err %v, want %q", c.env, err, c.wantErr)
			}
			continue
		}
		if err != nil || on != c.on {
			t.Errorf("%v: tracing %v (%v), want %v", c.env, on, err, c.on)
		}
	}
}

func spanNames(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}
