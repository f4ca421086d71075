package main

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// tracingFromEnv reports whether the standard OTEL_* variables ask for
// traces: an OTLP endpoint, or OTEL_TRACES_EXPORTER=otlp, and neither
// OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none. Tracing is off
// otherwise, and then costs nothing.
func tracingFromEnv(getenv func(string) string) (bool, error) {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false, nil
	}
	switch exp := getenv("OTEL_TRACES_EXPORTER"); exp {
	case "none":
		return false, nil
	case "", "otlp":
		if exp == "" && getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return false, nil
		}
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: Astro exports traces over OTLP only (otlp or none)", exp)
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := getenv(v); p != "" && p != "http/protobuf" {
			return false, fmt.Errorf("%s=%s: Astro exports OTLP over http/protobuf only", v, p)
		}
		if getenv(v) != "" {
			break
		}
	}
	return true, nil
}

// otlpTracerProvider exports spans over OTLP/HTTP. The exporter, sampler
// and resource read the rest of the OTEL_* variables themselves (endpoint,
// headers, OTEL_TRACES_SAMPLER, OTEL_SERVICE_NAME, ...), as every
// OpenTelemetry SDK does.
func otlpTracerProvider(ctx context.Context) (*sdktrace.TracerProvider, error) {
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "astro")),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	// A value a caller writes (a path can be a megabyte long) would stay in
	// memory with its span until exported, up to 2,048 spans; bounded
	// unless OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT says otherwise.
	limits := sdktrace.NewSpanLimits()
	if limits.AttributeValueLengthLimit < 0 {
		limits.AttributeValueLengthLimit = 1024
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithRawSpanLimits(limits)), nil
}

// tracerName names Astro's instrumentation scope.
const tracerName = "astro"

// tracer returns Astro's tracer of tp, nil without one.
func tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(tracerName)
}
