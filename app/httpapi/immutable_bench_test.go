package httpapi

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/requestid"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/jobguard/jobguard/app/auth"
	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/benchfig"
)

// BenchmarkImmutableVsCopy weighs Fiber's Immutable (every string and []byte a handler reads is
// a copy) against copying only what outlives the handler (methodLabel constants, the trace
// headers), on the middleware this app runs and an enqueue-shaped handler: path parameter,
// headers, a strict JSON body. Rounds alternate the two sides so machine noise hits both alike;
// it reports the median and the spread (min-max) of ns per request of each, and their ratio.
// Run: go test -run '^$' -bench ImmutableVsCopy -benchtime 1x ./app/
func BenchmarkImmutableVsCopy(b *testing.B) {
	const rounds, perRound = 15, 20000
	build := func(immutable bool) fasthttp.RequestHandler {
		hm := newHTTPMetrics()
		f := fiber.New(fiber.Config{Immutable: immutable, ErrorHandler: problem.ErrorHandler(zerolog.Nop()), DisableStartupMessage: true})
		f.Use(requestid.New(), accessLog(zerolog.Nop(), hm), serverSpans())
		f.Post("/jobs/:type", func(c *fiber.Ctx) error {
			var req struct {
				TenantID   string `json:"tenant_id"`
				ResourceID string `json:"resource_id"`
			}
			if err := decodeJSON(c.Body(), &req); err != nil {
				return err
			}
			raw, _ := idempotencyHeader(c)
			fp := fingerprint(c.Method(), c.Path(), c.Body())
			_, _ = auth.BearerToken(c.Get(fiber.HeaderAuthorization))
			return c.Status(202).JSON(fiber.Map{"type": c.Params("type"), "tenant": req.TenantID, "key": raw, "fp": fp[:8]})
		})
		return f.Handler()
	}
	var req fasthttp.Request
	req.Header.SetMethod(fiber.MethodPost)
	req.SetRequestURI("/jobs/rebuild-cache")
	req.Header.SetContentType(fiber.MIMEApplicationJSON)
	req.Header.Set("Authorization", "Bearer token-a-0123456789")
	req.Header.Set("Idempotency-Key", `"k-1"`)
	req.SetBodyString(`{"tenant_id":"t1","resource_id":"home"}`)

	sides := []struct {
		name string
		h    fasthttp.RequestHandler
		ns   []float64
	}{{name: "copy", h: build(false)}, {name: "immutable", h: build(true)}}
	var ctx fasthttp.RequestCtx
	b.ResetTimer()
	for round := range rounds {
		for i := range sides {
			s := &sides[(i+round)%2]
			start := time.Now()
			for range perRound {
				req.CopyTo(&ctx.Request)
				s.h(&ctx)
				if ctx.Response.StatusCode() != 202 {
					b.Fatalf("%s: %d %s", s.name, ctx.Response.StatusCode(), ctx.Response.Body())
				}
				ctx.Response.Reset()
			}
			s.ns = append(s.ns, float64(time.Since(start).Nanoseconds())/perRound)
		}
	}
	b.StopTimer()
	allocs := make([]float64, len(sides))
	for i, s := range sides {
		allocs[i] = testing.AllocsPerRun(2000, func() {
			req.CopyTo(&ctx.Request)
			s.h(&ctx)
			ctx.Response.Reset()
		})
		b.ReportMetric(allocs[i], s.name+"-allocs/req")
	}
	median := benchfig.Median
	for _, s := range sides {
		b.ReportMetric(median(s.ns), s.name+"-ns/req")
		b.ReportMetric(slices.Min(s.ns), s.name+"-min-ns/req")
		b.ReportMetric(slices.Max(s.ns), s.name+"-max-ns/req")
	}
	b.ReportMetric(median(sides[1].ns)/median(sides[0].ns), "immutable/copy")
	fmt.Printf("ns/request over %d rounds of %d: copy median %.0f (%.0f-%.0f), %.0f allocs; immutable median %.0f (%.0f-%.0f), %.0f allocs; ratio %.3f\n",
		rounds, perRound, median(sides[0].ns), slices.Min(sides[0].ns), slices.Max(sides[0].ns), allocs[0],
		median(sides[1].ns), slices.Min(sides[1].ns), slices.Max(sides[1].ns), allocs[1], median(sides[1].ns)/median(sides[0].ns))
}
