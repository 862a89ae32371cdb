package httpapi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	json "github.com/go-json-experiment/json"
	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/recent"
)

// Per-tenant request rate limit of the API (RATE_LIMIT, RATE_LIMIT_BURST): GCRA in Redis, one
// script per request, on Redis's clock, so every API process shares one budget per tenant. Who
// pays:
//   - with API_TOKENS, the authenticated tenant; a request with a bad token is refused (401) before
//     it spends anything, so no one can spend another tenant's budget;
//   - with the API open (development), the tenant the request names (tenant_id in the body, the
//     tenant parameter of a task's read-model route), else, for /jobs/{id} and a body without a
//     valid tenant_id, the client's address. An open API trusts its callers: naming other tenants
//     evades the limit.
//
// When Redis does not answer the limiter lets the request through (fail open): the request's own
// Redis calls answer 503 quickly, and an outage must not turn into 429s or 500s.
//
// An enqueue route does not take its limit in a round trip of its own: the take rides in the
// job's first create pipeline (firstTrip), unless this process saw the budget spent, or the
// limiter fail, within the last limitMemory: then it takes first and alone, as every other route
// does, so a flooding tenant's refused requests cost no speculative create.

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
	// spent remembers the budgets found spent, and failedAt (unix ns) when the limiter last
	// failed, for limitMemory (speculate), on clock (nil: time.Now).
	spent    *recent.Set
	failedAt atomic.Int64
	clock    func() time.Time
}

// limitMemory is how long a budget seen spent (or a limiter seen failing) is taken alone, before
// an enqueue sends anything else.
const limitMemory = time.Second

const rateLimitWarnEvery = 10 * time.Second

// newRateLimiter is nil (no limit) when rate is 0.
func newRateLimiter(rdb redis.UniversalClient, prefix string, rate, burst int, log zerolog.Logger) *rateLimiter {
	if rate <= 0 {
		return nil
	}
	l := &rateLimiter{rdb: rdb, prefix: prefix, interval: time.Second / time.Duration(rate), rate: rate, burst: burst, log: log,
		spent: recent.New(limitMemory)}
	l.spent.Clock = l.now
	return l
}

// take spends one request of key's budget, in a round trip of its own.
func (l *rateLimiter) take(ctx context.Context, key string) (rateDecision, error) {
	return parseRate(rateLimitScript.Run(ctx, l.rdb, []string{key}, l.interval.Microseconds(), l.burst).Int64Slice())
}

// queuedTake is a take queued in a pipeline; decision reads it once the pipeline ran.
type queuedTake struct {
	l   *rateLimiter
	key string
	cmd *redis.Cmd
}

// queue adds a take of key's budget to pipe (by SHA: the script is sent only when Redis lacks it).
func (l *rateLimiter) queue(ctx context.Context, pipe redis.Pipeliner, key string) queuedTake {
	return queuedTake{l: l, key: key, cmd: rateLimitScript.EvalSha(ctx, pipe, []string{key}, l.interval.Microseconds(), l.burst)}
}

// decision is the queued take's answer. One that found the script missing did not run, and is
// taken again alone, bounded as the middleware's is.
func (q queuedTake) decision(ctx context.Context) (rateDecision, error) {
	if err := q.cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		tctx, cancel := context.WithTimeout(ctx, rateLimitTimeout)
		defer cancel()
		return q.l.take(tctx, q.key)
	}
	return parseRate(q.cmd.Int64Slice())
}

// parseRate reads the rate limit script's reply.
func parseRate(res []int64, err error) (rateDecision, error) {
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
		return l.tenantKey(t)
	}
	if t, _ := c.Locals(localPathTenant).(string); config.TenantPattern.MatchString(t) {
		return l.tenantKey(t)
	}
	if c.Method() == fiber.MethodPost {
		var body struct {
			TenantID string `json:"tenant_id"`
		}
		// The enqueue's strict names (json v2): a TENANT_ID or a duplicate key names nobody.
		if json.Unmarshal(c.Body(), &body) == nil && config.TenantPattern.MatchString(body.TenantID) {
			return l.tenantKey(body.TenantID)
		}
	}
	return l.prefix + ":{ratelimit:ip:" + c.IP() + "}"
}

// requestKey is the budget of an enqueue whose body was accepted: its tenant is the token's (or
// it was refused 403) and was validated, so keyOf's reading of the body is not needed again.
func (l *rateLimiter) requestKey(c *fiber.Ctx, tenant string) string {
	if config.TenantPattern.MatchString(tenant) {
		return l.tenantKey(tenant)
	}
	return l.keyOf(c)
}

func (l *rateLimiter) tenantKey(t string) string { return l.prefix + ":{ratelimit:tenant:" + t + "}" }

// handler spends one request of the caller's budget (admit). A nil limiter lets everything
// through.
func (l *rateLimiter) handler() fiber.Handler {
	if l == nil {
		return func(c *fiber.Ctx) error { return c.Next() }
	}
	return func(c *fiber.Ctx) error {
		if err := l.admitRequest(c); err != nil {
			return err
		}
		return c.Next()
	}
}

// admitRequest is admit of the request's budget (keyOf). A nil limiter admits everything.
func (l *rateLimiter) admitRequest(c *fiber.Ctx) error {
	if l == nil {
		return nil
	}
	return l.admit(c, l.keyOf(c))
}

// admit spends one request of key's budget in a round trip of its own, bounded by
// rateLimitTimeout, and answers as judge does. A nil limiter admits everything.
func (l *rateLimiter) admit(c *fiber.Ctx, key string) error {
	if l == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), rateLimitTimeout)
	d, err := l.take(ctx, key)
	cancel()
	return l.judge(c, key, d, err)
}

// judge answers a take of key's budget: it sets the RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers-06 and refuses with 429 and Retry-After when the budget
// is spent; a take that failed lets the request through (fail open) without them.
func (l *rateLimiter) judge(c *fiber.Ctx, key string, d rateDecision, err error) error {
	if err != nil {
		l.warn(err)
		l.sawFailure()
		return nil // fail open
	}
	c.Set("RateLimit-Limit", strconv.Itoa(l.burst))
	c.Set("RateLimit-Remaining", strconv.FormatInt(d.Remaining, 10))
	c.Set("RateLimit-Reset", strconv.FormatInt(ceilSeconds(d.Reset), 10))
	if d.Allowed {
		return nil
	}
	l.sawSpent(key)
	retry := max(ceilSeconds(d.RetryAfter), 1)
	c.Set(fiber.HeaderRetryAfter, strconv.FormatInt(retry, 10))
	return &problem.HTTPError{Status: http.StatusTooManyRequests, Detail: fmt.Sprintf(
		"rate limit: at most %d requests per second per tenant, bursts of %d; retry after %d s", l.rate, l.burst, retry)}
}

func (l *rateLimiter) now() time.Time {
	if l.clock != nil {
		return l.clock()
	}
	return time.Now()
}

// sawSpent notes that key's budget refused a request.
func (l *rateLimiter) sawSpent(key string) { l.spent.Saw(key) }

// sawFailure notes that a take failed (Redis did not answer, or answered an error).
func (l *rateLimiter) sawFailure() { l.failedAt.Store(l.now().UnixNano()) }

// speculate reports whether an enqueue may send key's take with its create: not while the
// budget was seen spent, or the limiter seen failing, within limitMemory. (A take that fails in
// a pipeline fails only as fast as the pipeline: alone it gives up after rateLimitTimeout.)
func (l *rateLimiter) speculate(key string) bool {
	if l.now().Sub(time.Unix(0, l.failedAt.Load())) < limitMemory {
		return false
	}
	return !l.spent.Seen(key)
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
