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
func tracer() trace.Tracer { return otel.Tracer("github.com/jobguard/jobguard/engine") }

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

// startRunSpan starts the consumer span of one delivery, continuing the trace in its headers.
func startRunSpan(ctx context.Context, t *asynq.Task, jobID, delivery string) (context.Context, trace.Span) {
	ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(t.Headers()))
	return tracer().Start(ctx, "jobguard.run "+t.Type(), trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "asynq"),
			attribute.String("jobguard.job_id", jobID),
			attribute.String("jobguard.delivery", delivery),
			attribute.String("jobguard.type", t.Type()),
		))
}

// scriptSpan wraps one of the stack's scripts (lease + start, finish + release, fenced writes).
func scriptSpan(ctx context.Context, name string) (context.Context, trace.Span) {
	return tracer().Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system", "redis")))
}

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
