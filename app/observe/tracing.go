package observe

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/jobguard/jobguard/internal/redact"
)

// TracingEnabled reads the standard OTEL_* variables: tracing is on when an OTLP endpoint is set
// or OTEL_TRACES_EXPORTER=otlp, and off when OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true.
// Off is the default: the global no-op provider then costs next to nothing.
func TracingEnabled(lookup func(string) (string, bool)) bool {
	get := func(k string) string { v, _ := lookup(k); return v }
	if get("OTEL_SDK_DISABLED") == "true" || get("OTEL_TRACES_EXPORTER") == "none" {
		return false
	}
	return get("OTEL_TRACES_EXPORTER") == "otlp" || get("OTEL_EXPORTER_OTLP_ENDPOINT") != "" ||
		get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// SetupTracing installs an OTLP/HTTP exporter configured by the OTEL_* variables (endpoint,
// headers, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, sampler) and returns its shutdown.
// OpenTelemetry's own errors (an export that failed names its endpoint) become log lines with
// component=otel, redacted, instead of plain text from the standard logger.
func SetupTracing(ctx context.Context, log zerolog.Logger) (func(context.Context) error, error) {
	otelLog := log.With().Str("component", "otel").Logger()
	otel.SetLogger(logr.New(otelSink{log: otelLog}))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		otelLog.Warn().Err(redact.Error(err)).Msg("tracing error")
	}))
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("app: OTEL_EXPORTER_OTLP_ENDPOINT: %w", redact.Error(err))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return tp.Shutdown, nil
}

// otelSink is OpenTelemetry's own logger (what it says while it reads the OTEL_* variables, say):
// its messages become log lines with component=otel and the names of its values, never the
// values, which may be an endpoint's userinfo or a header's token. Without it OpenTelemetry
// prints them to stderr through the standard logger.
type otelSink struct{ log zerolog.Logger }

func (otelSink) Init(logr.RuntimeInfo) {}

func (otelSink) Enabled(level int) bool { return level == 0 }

func (s otelSink) Info(_ int, msg string, kv ...any) {
	s.log.Info().Strs("keys", keyNames(kv)).Msg(msg)
}

func (s otelSink) Error(err error, msg string, kv ...any) {
	s.log.Warn().Err(redact.Error(err)).Strs("keys", keyNames(kv)).Msg(msg)
}

func (s otelSink) WithValues(...any) logr.LogSink { return s }

func (s otelSink) WithName(name string) logr.LogSink {
	return otelSink{log: s.log.With().Str("logger", name).Logger()}
}

// keyNames are the keys of a logr key-value list.
func keyNames(kv []any) []string {
	var out []string
	for i := 0; i < len(kv); i += 2 {
		out = append(out, fmt.Sprint(kv[i]))
	}
	return out
}
