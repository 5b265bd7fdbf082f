// Package tracing sets up the process's OpenTelemetry traces (DESIGN
// §17) from the SDK's own environment variables; the agent and chat start
// spans on the provider it returns. It imports nothing of pinplan's.
package tracing

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Tracing is the process's OpenTelemetry traces, set up only
// through the SDK's own environment variables, never the TOML file: with
// neither OTEL_EXPORTER_OTLP_TRACES_ENDPOINT nor OTEL_EXPORTER_OTLP_ENDPOINT
// there is no exporter, no batch processor and no goroutine, and the spans
// the agent and chat start are no-ops.
type Tracing struct {
	Provider trace.TracerProvider
	// content passes message text, tool arguments and results to the
	// spans (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true)
	// with the configured secrets taken out; nil records none.
	Content  func(string) string
	Shutdown func(context.Context) error
}

// Options are what the traces say of the process.
type Options struct {
	Version    string              // service.version
	InstanceID string              // service.instance.id: the replica's id
	Redact     func(string) string // takes the configured secrets out of captured content
}

// New reads the switches with getenv (the process environment);
// the exporter and the SDK read the rest of their variables (headers,
// timeouts, TLS, sampling, batching, resource attributes) from the
// process environment themselves, as the SDK documents them.
func New(ctx context.Context, opts Options, getenv func(string) string, log *slog.Logger) (*Tracing, error) {
	off := &Tracing{Provider: noop.NewTracerProvider(), Shutdown: func(context.Context) error { return nil }}
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return off, nil
	}
	switch e := getenv("OTEL_TRACES_EXPORTER"); e {
	case "none":
		return off, nil
	case "", "otlp":
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER: %q is not supported; use otlp (or none)", e)
	}
	endpoint := cmp.Or(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	if endpoint == "" {
		return off, nil
	}
	protoVar := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	protocol := getenv(protoVar)
	if protocol == "" {
		protoVar, protocol = "OTEL_EXPORTER_OTLP_PROTOCOL", getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exp *otlptrace.Exporter
	var err error
	switch protocol {
	case "", "http/protobuf":
		protocol = "http/protobuf"
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("%s: %q is not supported; use http/protobuf or grpc", protoVar, protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("traces: OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName("pinplan"), semconv.ServiceVersion(opts.Version),
			semconv.ServiceInstanceID(opts.InstanceID)),
		resource.WithFromEnv()) // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	if err != nil {
		exp.Shutdown(ctx)
		return nil, fmt.Errorf("traces: resource: %w", err)
	}
	// The sampler comes from OTEL_TRACES_SAMPLER and its argument, the
	// batching from OTEL_BSP_*: NewTracerProvider reads them.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(&loggedExporter{SpanExporter: exp, log: log}), sdktrace.WithResource(res))
	log.Info("exporting traces", "endpoint", redactEndpoint(endpoint), "protocol", protocol)
	t := &Tracing{Provider: tp, Shutdown: tp.Shutdown}
	if strings.EqualFold(getenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"), "true") {
		log.Warn("traces carry message text, tool arguments and results (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true)")
		t.Content = opts.Redact
	}
	return t, nil
}

// redactEndpoint is an endpoint for the log: without user info or query.
func redactEndpoint(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return "(not a URL)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// loggedExporter logs an export that failed, once until one succeeds again,
// instead of the SDK's global error handler printing every failed batch.
type loggedExporter struct {
	sdktrace.SpanExporter
	log *slog.Logger

	mu      sync.Mutex // guards failing
	failing bool
}

// ExportSpans implements sdktrace.SpanExporter.
func (e *loggedExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case err != nil && !e.failing:
		e.failing = true
		e.log.Warn("traces not exported; dropping them until the collector takes them again", "spans", len(spans), "err", err)
	case err == nil && e.failing:
		e.failing = false
		e.log.Info("traces exported again")
	}
	return nil // said once above; the batch is dropped either way
}
