package natslog

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The W3C trace context of the request that caused an event travels in
// its headers twice: as the CloudEvents distributed-tracing extension's
// attributes (ce-traceparent, ce-tracestate, like every other attribute in
// binary mode) and under the W3C names, which OpenTelemetry's propagators
// read as they are. Both hold the same value.
const (
	HeaderTraceParent = "ce-traceparent"
	HeaderTraceState  = "ce-tracestate"
)

// headerCarrier lets a propagator read and write NATS headers, whose keys,
// unlike HTTP's, are kept as written.
type headerCarrier nats.Header

func (c headerCarrier) Get(key string) string { return nats.Header(c).Get(key) }
func (c headerCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }
func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// injectTrace writes the trace context of ctx, when there is one, into h.
func injectTrace(ctx context.Context, h nats.Header) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	propagation.TraceContext{}.Inject(ctx, headerCarrier(h))
	if v := h.Get("traceparent"); v != "" {
		h.Set(HeaderTraceParent, v)
	}
	if v := h.Get("tracestate"); v != "" {
		h.Set(HeaderTraceState, v)
	}
}

// TraceContext is the span context an event's headers carry (the
// CloudEvents attribute first), invalid when they carry none.
func TraceContext(h nats.Header) trace.SpanContext {
	c := headerCarrier{}
	if v := h.Get(HeaderTraceParent); v != "" {
		c.Set("traceparent", v)
		c.Set("tracestate", h.Get(HeaderTraceState))
	} else {
		c = headerCarrier(h)
	}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), c))
}
