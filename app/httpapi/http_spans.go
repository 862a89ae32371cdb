package httpapi

import (
	"errors"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobguard/jobguard/app/problem"
)

// fasthttpCarrier reads and writes W3C trace headers on a Fiber request.
type fasthttpCarrier struct{ c *fiber.Ctx }

// Get copies: the extracted tracestate's members are substrings of it, and the span keeps them
// after the request's buffers are reused.
func (f fasthttpCarrier) Get(key string) string { return strings.Clone(f.c.Get(key)) }

func (f fasthttpCarrier) Set(key, value string) { f.c.Request().Header.Set(key, value) }
func (f fasthttpCarrier) Keys() []string        { return []string{"traceparent", "tracestate"} }

// serverSpans starts a server span per request, continuing an incoming traceparent; handlers see
// it in c.UserContext(). A span outlives its request (the exporter batches), so what it keeps is
// a constant (methodLabel, the route pattern) or a copy.
func serverSpans() fiber.Handler {
	return func(c *fiber.Ctx) error {
		ctx := propagation.TraceContext{}.Extract(c.UserContext(), fasthttpCarrier{c})
		method := methodLabel(c.Method())
		ctx, span := otel.Tracer("github.com/jobguard/jobguard/app").Start(ctx, method,
			trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", method)))
		defer span.End()
		c.SetUserContext(ctx)
		err := c.Next()
		route := routeLabel(c)
		span.SetName(method + " " + route)
		span.SetAttributes(attribute.String("http.route", route))
		if err != nil {
			span.RecordError(err)
		}
		status := c.Response().StatusCode()
		var he *problem.HTTPError
		if errors.As(err, &he) {
			status = he.Status
		}
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if status >= 500 {
			span.SetStatus(codes.Error, strconv.Itoa(status))
		}
		return err
	}
}
