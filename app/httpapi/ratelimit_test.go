package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
	"github.com/jobguard/jobguard/tasks"
	"github.com/jobguard/jobguard/tasks/registry"
)

// A tenant that spends its burst gets 429 with Retry-After; another tenant is not affected; the
// bucket's key expires on its own; after Retry-After the tenant passes again.
func TestRateLimitPerTenant(t *testing.T) {
	t.Parallel()
	env := map[string]string{"API_TOKENS": twoTenants["API_TOKENS"], "RATE_LIMIT": "1", "RATE_LIMIT_BURST": "3"}
	r := startApp(t, RoleAPI, env)
	stock := func(tok, tenant string) *http.Response {
		resp, _ := get(t, r.base+"/stock/"+tenant+"/sku-1", bearer(tok)...)
		return resp
	}
	// At 1 request per second, the burst of 3 is spent well within the second it takes to earn one.
	for i := 1; i <= 3; i++ {
		resp := stock(tokenA, "t1")
		if resp.StatusCode == http.StatusTooManyRequests {
			t.Fatalf("request %d of a burst of 3 refused", i)
		}
		if got := resp.Header.Get("RateLimit-Remaining"); got != strconv.Itoa(3-i) || resp.Header.Get("RateLimit-Limit") != "3" {
			t.Fatalf("request %d: RateLimit-Limit %q, RateLimit-Remaining %q", i, resp.Header.Get("RateLimit-Limit"), got)
		}
	}
	// Any tenant route spends the same budget: an enqueue is refused now, and keeps no job (its
	// create, sent with its take, is abandoned).
	resp, body := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"home"}`, bearer(tokenA)...)
	p := decodeProblem(t, resp, body)
	retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if p.Status != http.StatusTooManyRequests || err != nil || retry < 1 || retry > 1 {
		t.Fatalf("burst+1: %+v, Retry-After %q", p, resp.Header.Get("Retry-After"))
	}
	if resp.Header.Get("RateLimit-Remaining") != "0" {
		t.Fatalf("refused answer: RateLimit-Remaining %q", resp.Header.Get("RateLimit-Remaining"))
	}
	if n := len(r.Redis().Keys(context.Background(), "jobguard:*:job:*").Val()); n != 0 {
		t.Fatalf("a refused enqueue left %d job records", n)
	}
	// The other tenant has its own budget.
	if resp := stock(tokenB, "t2"); resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit-Remaining") != "2" {
		t.Fatalf("other tenant: %d, remaining %q", resp.StatusCode, resp.Header.Get("RateLimit-Remaining"))
	}
	// The bucket's key expires when it would be full again: within burst / rate seconds.
	pttl, err := r.Redis().PTTL(context.Background(), "jobguard:{ratelimit:tenant:t1}").Result()
	if err != nil || pttl <= 0 || pttl > 3*time.Second {
		t.Fatalf("limiter key PTTL %v, %v; want in (0, 3s]", pttl, err)
	}
	time.Sleep(time.Duration(retry) * time.Second) // the wait the answer asked for is the behaviour under test
	if resp := stock(tokenA, "t1"); resp.StatusCode != http.StatusOK {
		t.Fatalf("after Retry-After: %d", resp.StatusCode)
	}
}

// With the API open, the budget is the tenant the request names, else the client's address.
func TestRateLimitOpenAPIKeys(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, map[string]string{"RATE_LIMIT": "1", "RATE_LIMIT_BURST": "1"})
	if resp, _ := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"a","resource_id":"x"}`); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("first for tenant a: %d", resp.StatusCode)
	}
	if resp, _ := get(t, r.base+"/cache/a/x"); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("tenant a again, named by the path: %d", resp.StatusCode)
	}
	if resp, _ := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"b","resource_id":"x"}`); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("tenant b: %d", resp.StatusCode)
	}
	// No tenant in the request: the client's address pays.
	if resp, _ := get(t, r.base+"/jobs/nosuchjob"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("first by address: %d", resp.StatusCode)
	}
	if resp, _ := get(t, r.base+"/jobs/nosuchjob"); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second by address: %d", resp.StatusCode)
	}
	for _, key := range []string{"jobguard:{ratelimit:tenant:a}", "jobguard:{ratelimit:tenant:b}", "jobguard:{ratelimit:ip:127.0.0.1}"} {
		if n := r.Redis().Exists(context.Background(), key).Val(); n != 1 {
			t.Errorf("no limiter key %s", key)
		}
	}
	// Health, readiness and metrics are never limited.
	for i := 0; i < 3; i++ {
		if resp, _ := get(t, r.base+"/healthz"); resp.StatusCode != http.StatusOK {
			t.Fatalf("healthz: %d", resp.StatusCode)
		}
	}
}

// limiterApp serves one limited route that answers 200.
func limiterApp(l *rateLimiter) *fiber.App {
	f := fiber.New(fiber.Config{ErrorHandler: problem.ErrorHandler(zerolog.Nop())})
	f.Get("/stock/:tenant", pathTenant(tasks.Route{Tenant: "tenant"}), l.handler(), func(c *fiber.Ctx) error { return c.SendString("ok") })
	return f
}

func limiterGet(t *testing.T, f *fiber.App, tenant string) *http.Response {
	t.Helper()
	resp, err := f.Test(httptest.NewRequest(http.MethodGet, "/stock/"+tenant, nil), -1)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// A Redis that stalls or is down lets requests through (fail open), within the limiter's timeout.
func TestRateLimitFailsOpen(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// As the app's client: commands honour their context's deadline.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer rdb.Close()
	f := limiterApp(newRateLimiter(rdb, "jobguard", 1, 1, zerolog.Nop()))
	if resp := limiterGet(t, f, "t1"); resp.StatusCode != 200 {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	if resp := limiterGet(t, f, "t1"); resp.StatusCode != 429 {
		t.Fatalf("limit not applied while Redis is up: %d", resp.StatusCode)
	}
	for _, fault := range []struct {
		name  string
		apply func()
	}{
		{"stalled", func() {
			if err := srv.Pause(); err != nil {
				t.Fatal(err)
			}
		}},
		{"down", func() { _ = srv.Resume(); srv.Kill() }},
	} {
		fault.apply()
		start := time.Now()
		resp := limiterGet(t, f, "t1")
		if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Limit") != "" {
			t.Fatalf("with Redis %s: %d %v", fault.name, resp.StatusCode, resp.Header)
		}
		if d := time.Since(start); d > rateLimitTimeout+500*time.Millisecond {
			t.Fatalf("with Redis %s, fail-open took %v", fault.name, d)
		}
	}
}

// The script runs on the embedded development Redis (miniredis) too, where the limit is on by
// default, and reads its clock from Redis.
func TestRateLimitOnEmbeddedRedis(t *testing.T) {
	t.Parallel()
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	l := newRateLimiter(rdb, "jobguard", 1, 2, zerolog.Nop())
	ctx := context.Background()
	for i, want := range []bool{true, true, false} {
		d, err := l.take(ctx, "jobguard:{ratelimit:tenant:t1}")
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != want {
			t.Fatalf("request %d: %+v", i+1, d)
		}
	}
	testsupport.Eventually(t, 3*time.Second, "the bucket refills", func() bool {
		d, err := l.take(ctx, "jobguard:{ratelimit:tenant:t1}")
		return err == nil && d.Allowed
	})
}

// An enqueue sends its take with its create unless this process saw the budget spent, or the
// limiter fail, within limitMemory: a flooding tenant's refused requests then cost no
// speculative create, and a limiter's slow node no more than rateLimitTimeout.
func TestLimiterRemembersWhatItSaw(t *testing.T) {
	t.Parallel()
	now := time.Now()
	l := newRateLimiter(nil, "jobguard", 1, 1, zerolog.Nop())
	l.clock = func() time.Time { return now }
	a, b := l.tenantKey("a"), l.tenantKey("b")
	if !l.speculate(a) {
		t.Fatal("a budget never seen spent is not speculated")
	}
	l.sawSpent(a)
	if l.speculate(a) || !l.speculate(b) {
		t.Fatalf("after a's refusal: speculate a %v, b %v; want false, true", l.speculate(a), l.speculate(b))
	}
	now = now.Add(limitMemory)
	if !l.speculate(a) {
		t.Fatal("a's refusal is remembered past limitMemory")
	}
	l.sawFailure()
	if l.speculate(a) || l.speculate(b) {
		t.Fatal("a failing limiter is speculated")
	}
	now = now.Add(limitMemory)
	if !l.speculate(a) || !l.speculate(b) {
		t.Fatal("the failure is remembered past limitMemory")
	}
}

// stateKeys counts jobguard's keys but the limiter's buckets: every request spends its bucket,
// refused or not, and a bucket expires on its own once full again.
func stateKeys(rdb redis.Cmdable) int {
	n := 0
	for _, k := range rdb.Keys(context.Background(), "jobguard:*").Val() {
		if !strings.HasPrefix(k, "jobguard:{ratelimit:") {
			n++
		}
	}
	return n
}

func TestRateLimitConfig(t *testing.T) {
	t.Parallel()
	cfg, err := config.FromLookup(lookupFrom(nil), registry.All())
	if err != nil || cfg.RateLimit != 100 || cfg.RateLimitBurst != 200 {
		t.Fatalf("defaults: %d/%d %v", cfg.RateLimit, cfg.RateLimitBurst, err)
	}
	cfg, err = config.FromLookup(lookupFrom(map[string]string{"RATE_LIMIT": "0", "RATE_LIMIT_BURST": "0"}), registry.All())
	if err != nil || newRateLimiter(nil, "jobguard", cfg.RateLimit, cfg.RateLimitBurst, zerolog.Nop()) != nil {
		t.Fatalf("RATE_LIMIT=0 must turn the limit off: %v", err)
	}
	for _, tc := range []struct {
		env map[string]string
		bad string
	}{
		{map[string]string{"RATE_LIMIT": "-1"}, "RATE_LIMIT"},
		{map[string]string{"RATE_LIMIT": "1000001"}, "RATE_LIMIT"},
		{map[string]string{"RATE_LIMIT": "ten"}, "RATE_LIMIT"},
		{map[string]string{"RATE_LIMIT_BURST": "0"}, "RATE_LIMIT_BURST"},
		{map[string]string{"RATE_LIMIT_BURST": "1000001"}, "RATE_LIMIT_BURST"},
	} {
		var ce *config.Error
		if _, err := config.FromLookup(lookupFrom(tc.env), registry.All()); !errors.As(err, &ce) || ce.Var != tc.bad {
			t.Errorf("%v: %v, want an error naming %s", tc.env, err, tc.bad)
		}
	}
}
