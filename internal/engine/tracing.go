package engine

import (
	"context"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// tracer is resolved through the global provider at each use, so a process that never configures
// OpenTelemetry pays for no-op spans only.
func tracer() trace.Tracer { return otel.Tracer("github.com/jobguard/jobguard/internal/engine") }

// TraceHeaders returns the W3C trace context of ctx as task headers (traceparent, tracestate), for
// a job's deliveries to continue the trace of the request that created it.
func TraceHeaders(ctx context.Context) map[string]string {
	h := map[string]string{}
	propagation.TraceContext{}.Inject(ctx, propagation.MapCarrier(h))
	if len(h) == 0 {
		return nil
	}
	return h
}

// startRunSpan starts the consumer span of one delivery, continuing the trace in its headers. The
// attributes are set only on a recording span: with no provider configured the span is a no-op,
// and building them cost allocations on every task.
func startRunSpan(ctx context.Context, t *asynq.Task, jobID, delivery string) (context.Context, trace.Span) {
	if h := t.Headers(); len(h) > 0 {
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(h))
	}
	ctx, span := tracer().Start(ctx, "jobguard.run", runSpanKind)
	if span.IsRecording() {
		span.SetName("jobguard.run " + t.Type())
		span.SetAttributes(
			attribute.String("messaging.system", "asynq"),
			attribute.String("jobguard.job_id", jobID),
			attribute.String("jobguard.delivery", delivery),
			attribute.String("jobguard.type", t.Type()),
		)
	}
	return ctx, span
}

// The span options every run and script span takes, built once.
var (
	runSpanKind    = trace.WithSpanKind(trace.SpanKindConsumer)
	scriptSpanKind = trace.WithSpanKind(trace.SpanKindClient)
	redisSystem    = attribute.String("db.system", "redis")
)

// scriptSpan wraps one of the stack's scripts (lease + start, finish + release, fenced writes).
func scriptSpan(ctx context.Context, name string) (context.Context, trace.Span) {
	ctx, span := tracer().Start(ctx, name, scriptSpanKind)
	if span.IsRecording() {
		span.SetAttributes(redisSystem)
	}
	return ctx, span
}

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
