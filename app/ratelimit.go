package app

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	json "github.com/go-json-experiment/json"
	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// Per-tenant request rate limit of the API (RATE_LIMIT, RATE_LIMIT_BURST): GCRA in Redis, one
// script and one round trip per request, on Redis's clock, so every API process shares one
// budget per tenant. Who pays:
//   - with API_TOKENS, the authenticated tenant; a request with a bad token is refused (401) before
//     it spends anything, so no one can spend another tenant's budget;
//   - with the API open (development), the tenant the request names (tenant_id in the body, the
//     tenant parameter of a task's read-model route), else, for /jobs/{id} and a body without a
//     valid tenant_id, the client's address. An open API trusts its callers: naming other tenants
//     evades the limit.
//
// When Redis does not answer the limiter lets the request through (fail open): the request's own
// Redis calls answer 503 quickly, and an outage must not turn into 429s or 500s.

var rateLimitScript = appScript("ratelimit.lua")

// rateLimitTimeout bounds the limiter's round trip, so a stalled Redis costs a request at most
// this much before the limiter gives up and lets it through.
const rateLimitTimeout = 250 * time.Millisecond

// rateDecision is the answer of one check.
type rateDecision struct {
	Allowed bool
	// Remaining is how many more requests would be admitted right now.
	Remaining int64
	// RetryAfter is when a refused request would be admitted (0 when allowed).
	RetryAfter time.Duration
	// Reset is how long until the bucket is full again (and its key expires).
	Reset time.Duration
}

type rateLimiter struct {
	rdb      redis.UniversalClient
	prefix   string
	interval time.Duration // between requests at the sustained rate
	rate     int
	burst    int
	log      zerolog.Logger
	// lastWarn (unix ns) keeps an outage to one log line per rateLimitWarnEvery.
	lastWarn atomic.Int64
}

const rateLimitWarnEvery = 10 * time.Second

// newRateLimiter is nil (no limit) when rate is 0.
func newRateLimiter(rdb redis.UniversalClient, prefix string, rate, burst int, log zerolog.Logger) *rateLimiter {
	if rate <= 0 {
		return nil
	}
	return &rateLimiter{rdb: rdb, prefix: prefix, interval: time.Second / time.Duration(rate), rate: rate, burst: burst, log: log}
}

// take spends one request of key's budget.
func (l *rateLimiter) take(ctx context.Context, key string) (rateDecision, error) {
	res, err := rateLimitScript.Run(ctx, l.rdb, []string{key}, l.interval.Microseconds(), l.burst).Int64Slice()
	if err != nil {
		return rateDecision{}, fmt.Errorf("app: rate limit: %w", err)
	}
	if len(res) != 4 || (res[0] != 0 && res[0] != 1) || res[1] < 0 || res[2] < 0 || res[3] < 0 || (res[0] == 1) != (res[2] == 0) {
		return rateDecision{}, fmt.Errorf("app: rate limit: unexpected reply %v", res)
	}
	return rateDecision{
		Allowed: res[0] == 1, Remaining: res[1],
		RetryAfter: time.Duration(res[2]) * time.Microsecond, Reset: time.Duration(res[3]) * time.Microsecond,
	}, nil
}

// keyOf is the budget the request spends (see the package comment above). Every part of it was
// checked against tenantRe or is an IP address, and the key is a new string: nothing of Fiber's
// buffers is kept.
func (l *rateLimiter) keyOf(c *fiber.Ctx) string {
	if t := tenantOf(c); t != "" {
		return l.prefix + ":{ratelimit:tenant:" + t + "}"
	}
	if t, _ := c.Locals(localPathTenant).(string); tenantRe.MatchString(t) {
		return l.prefix + ":{ratelimit:tenant:" + t + "}"
	}
	if c.Method() == fiber.MethodPost {
		var body struct {
			TenantID string `json:"tenant_id"`
		}
		// The enqueue's strict names (json v2): a TENANT_ID or a duplicate key names nobody.
		if json.Unmarshal(c.Body(), &body) == nil && tenantRe.MatchString(body.TenantID) {
			return l.prefix + ":{ratelimit:tenant:" + body.TenantID + "}"
		}
	}
	return l.prefix + ":{ratelimit:ip:" + c.IP() + "}"
}

// handler spends one request of the caller's budget, sets the RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers-06 and refuses with 429 and Retry-After when it is spent.
// A nil limiter lets everything through.
func (l *rateLimiter) handler() fiber.Handler {
	if l == nil {
		return func(c *fiber.Ctx) error { return c.Next() }
	}
	return func(c *fiber.Ctx) error {
		ctx, cancel := context.WithTimeout(c.UserContext(), rateLimitTimeout)
		d, err := l.take(ctx, l.keyOf(c))
		cancel()
		if err != nil {
			l.warn(err)
			return c.Next() // fail open
		}
		c.Set("RateLimit-Limit", strconv.Itoa(l.burst))
		c.Set("RateLimit-Remaining", strconv.FormatInt(d.Remaining, 10))
		c.Set("RateLimit-Reset", strconv.FormatInt(ceilSeconds(d.Reset), 10))
		if d.Allowed {
			return c.Next()
		}
		retry := max(ceilSeconds(d.RetryAfter), 1)
		c.Set(fiber.HeaderRetryAfter, strconv.FormatInt(retry, 10))
		return &HTTPError{Status: http.StatusTooManyRequests, Detail: fmt.Sprintf(
			"rate limit: at most %d requests per second per tenant, bursts of %d; retry after %d s", l.rate, l.burst, retry)}
	}
}

func (l *rateLimiter) warn(err error) {
	now := time.Now().UnixNano()
	last := l.lastWarn.Load()
	if now-last < int64(rateLimitWarnEvery) || !l.lastWarn.CompareAndSwap(last, now) {
		return
	}
	ev := l.log.Warn().Err(err)
	if errors.Is(err, context.DeadlineExceeded) {
		ev = ev.Dur("timeout", rateLimitTimeout)
	}
	ev.Msg("rate limiter unavailable: requests pass unlimited")
}

// ceilSeconds rounds up to whole seconds, as Retry-After and RateLimit-Reset carry them.
func ceilSeconds(d time.Duration) int64 { return int64(math.Ceil(d.Seconds())) }
