package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// asynqFault fails asynq's enqueue script (its first key is the task's hash,
// asynq:{<queue>}:t:<id>) while on: a broker that refuses the delivery after the job's create.
type asynqFault struct{ on atomic.Bool }

var errAsynqRefused = errors.New("injected: asynq refused the delivery")

func (f *asynqFault) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f *asynqFault) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if f.on.Load() && isAsynqEnqueue(cmd) {
			cmd.SetErr(errAsynqRefused)
			return errAsynqRefused
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook refuses the enqueues of a pipeline (the app's asynq client sends concurrent
// enqueues in shared pipelines) and sends the rest.
func (f *asynqFault) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !f.on.Load() {
			return next(ctx, cmds)
		}
		var rest []redis.Cmder
		for _, cmd := range cmds {
			if isAsynqEnqueue(cmd) {
				cmd.SetErr(errAsynqRefused)
			} else {
				rest = append(rest, cmd)
			}
		}
		if len(rest) == 0 {
			return errAsynqRefused
		}
		return next(ctx, rest)
	}
}

func isAsynqEnqueue(cmd redis.Cmder) bool {
	args := cmd.Args()
	if (cmd.Name() != "evalsha" && cmd.Name() != "eval") || len(args) < 4 {
		return false
	}
	key, _ := args[3].(string)
	return strings.HasPrefix(key, "asynq:{") && strings.Contains(key, "}:t:")
}

// keySet is every jobguard key but the limiter's buckets, sorted: what a request left behind.
func keySet(t *testing.T, rdb redis.UniversalClient) []string {
	t.Helper()
	keys, err := rdb.Keys(context.Background(), "jobguard:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	keys = slices.DeleteFunc(keys, func(k string) bool { return strings.HasPrefix(k, "jobguard:{ratelimit:") })
	slices.Sort(keys)
	return keys
}

// spendBudget makes tenant's rate-limit budget spent for the next hour (the GCRA's arrival time
// an hour ahead), so its next request is refused.
func spendBudget(t *testing.T, r *running, tenant string) {
	t.Helper()
	ahead := time.Now().Add(time.Hour).UnixMicro()
	if err := r.Redis().Set(context.Background(), "jobguard:{ratelimit:tenant:"+tenant+"}", strconv.FormatInt(ahead, 10), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
}

// The enqueue's round trips, counted on the app's own client: 3 for a new job with an
// Idempotency-Key (the rate limit, the key's claim and the create in one pipeline; asynq's
// enqueue; the confirmation with the stored answer), and what the other answers cost.
func TestEnqueueRoundTrips(t *testing.T) {
	t.Parallel()
	counter := &testsupport.RoundTrips{}
	r := startAppWith(t, RoleAPI, nil, func(a Process) { a.Redis().AddHook(counter) })
	idem := idempotency{rdb: r.Redis(), prefix: "jobguard", retention: time.Hour}
	rebuild := func(tenant, resource string) string {
		return fmt.Sprintf(`{"tenant_id":%q,"resource_id":%q}`, tenant, resource)
	}
	key := func(k string) []string { return []string{"Idempotency-Key", strconv.Quote(k)} }
	type step struct {
		name   string
		setUp  func(pass int) // not counted
		send   func(pass int) (*http.Response, string)
		status int
		trips  int64
	}
	steps := []step{
		{name: "new job with a key", trips: 3, status: 202, send: func(p int) (*http.Response, string) {
			return post(t, r, "/jobs/rebuild-cache", rebuild("t1", fmt.Sprint("new-", p)), key(fmt.Sprint("k-new-", p))...)
		}},
		{name: "replay (its job still waits: the create finds it, writes nothing)", trips: 1, status: 202, send: func(p int) (*http.Response, string) {
			return post(t, r, "/jobs/rebuild-cache", rebuild("t1", fmt.Sprint("new-", p)), key(fmt.Sprint("k-new-", p))...)
		}},
		{name: "dedup duplicate with a new key", trips: 2, status: 200, send: func(p int) (*http.Response, string) {
			return post(t, r, "/jobs/rebuild-cache", rebuild("t1", fmt.Sprint("new-", p)), key(fmt.Sprint("k-dup-", p))...)
		}},
		{name: "dedup duplicate without a key", trips: 2, status: 200, send: func(p int) (*http.Response, string) {
			return post(t, r, "/jobs/rebuild-cache", rebuild("t1", fmt.Sprint("new-", p)))
		}},
		{name: "replay whose create made a job (taken back)", trips: 2, status: 202,
			setUp: func(p int) { // what the job's start does: its until_started marker goes
				tag := engine.ResourceTag(fmt.Sprint("t1:new-", p))
				if err := r.Redis().Del(context.Background(), "jobguard:{"+tag+"}:dedup:rebuild").Err(); err != nil {
					t.Fatal(err)
				}
			},
			send: func(p int) (*http.Response, string) {
				return post(t, r, "/jobs/rebuild-cache", rebuild("t1", fmt.Sprint("new-", p)), key(fmt.Sprint("k-new-", p))...)
			}},
		{name: "new job without a key", trips: 3, status: 202, send: func(p int) (*http.Response, string) {
			return post(t, r, "/jobs/rebuild-cache", rebuild("t1", fmt.Sprint("plain-", p)))
		}},
		{name: "mismatch (the speculative job abandoned)", trips: 2, status: 422, send: func(p int) (*http.Response, string) {
			return post(t, r, "/jobs/rebuild-cache", rebuild("t1", fmt.Sprint("other-", p)), key(fmt.Sprint("k-new-", p))...)
		}},
		{name: "in flight (the speculative job abandoned)", trips: 2, status: 409,
			setUp: func(p int) {
				body := rebuild("t1", fmt.Sprint("flight-", p))
				if _, _, err := idem.begin(context.Background(), "t1", fmt.Sprint("k-flight-", p), fingerprint("POST", "/jobs/rebuild-cache", []byte(body))); err != nil {
					t.Fatal(err)
				}
			},
			send: func(p int) (*http.Response, string) {
				return post(t, r, "/jobs/rebuild-cache", rebuild("t1", fmt.Sprint("flight-", p)), key(fmt.Sprint("k-flight-", p))...)
			}},
		{name: "rate limited, speculated (the job abandoned, the claim released)", trips: 3, status: 429,
			setUp: func(p int) { spendBudget(t, r, fmt.Sprint("limited-", p)) },
			send: func(p int) (*http.Response, string) {
				return post(t, r, "/jobs/rebuild-cache", rebuild(fmt.Sprint("limited-", p), "x"), key(fmt.Sprint("k-limited-", p))...)
			}},
		{name: "rate limited again (the limit alone first)", trips: 1, status: 429, send: func(p int) (*http.Response, string) {
			return post(t, r, "/jobs/rebuild-cache", rebuild(fmt.Sprint("limited-", p), "y"), key(fmt.Sprint("k-limited-y-", p))...)
		}},
		{name: "reserve-stock with a key (its order's claim a round trip of its own)", trips: 4, status: 202, send: func(p int) (*http.Response, string) {
			return post(t, r, "/jobs/reserve-stock", fmt.Sprintf(`{"tenant_id":"t1","order_id":"o-%d","sku":"s","quantity":1}`, p), key(fmt.Sprint("k-order-", p))...)
		}},
	}
	// Pass 0 loads every script into Redis and publishes asynq's queue; pass 1 is counted.
	for pass := range 2 {
		for _, s := range steps {
			if s.setUp != nil {
				s.setUp(pass)
			}
			before := counter.N()
			resp, body := s.send(pass)
			trips := counter.N() - before
			if resp.StatusCode != s.status {
				t.Fatalf("pass %d, %s: %d %s", pass, s.name, resp.StatusCode, body)
			}
			if pass == 1 && trips != s.trips {
				t.Errorf("%s: %d round trips, want %d", s.name, trips, s.trips)
			}
			if pass == 1 {
				t.Logf("%s: %d round trips", s.name, trips)
			}
		}
	}
}

// A request the gate refuses after its create ran speculatively leaves nothing: no job record,
// timeline, dedup marker, pending flag or Idempotency-Key claim. Nor does one whose asynq
// enqueue fails.
func TestRefusedEnqueuesLeaveNothing(t *testing.T) {
	t.Parallel()
	fault := &asynqFault{}
	r := startAppWith(t, RoleAPI, nil, func(a Process) { a.Redis().AddHook(fault) })
	idem := idempotency{rdb: r.Redis(), prefix: "jobguard", retention: time.Hour}
	if resp, body := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"kept"}`, "Idempotency-Key", `"k1"`); resp.StatusCode != 202 {
		t.Fatal(resp.StatusCode, body)
	}
	flight := `{"tenant_id":"t1","resource_id":"flight"}`
	if _, _, err := idem.begin(context.Background(), "t1", "k-flight", fingerprint("POST", "/jobs/rebuild-cache", []byte(flight))); err != nil {
		t.Fatal(err)
	}
	spendBudget(t, r, "limited")
	for _, c := range []struct {
		name, path, body, key string
		status                int
		fault                 bool
	}{
		{"rate limited", "/jobs/rebuild-cache", `{"tenant_id":"limited","resource_id":"r"}`, "k-limited", 429, false},
		{"rate limited, order", "/jobs/reserve-stock", `{"tenant_id":"limited","order_id":"o","sku":"s","quantity":1}`, "k-limited-o", 429, false},
		{"mismatch", "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"other"}`, "k1", 422, false},
		{"in flight", "/jobs/rebuild-cache", flight, "k-flight", 409, false},
		{"asynq refuses", "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"refused"}`, "k-refused", 503, true},
		{"asynq refuses, order", "/jobs/reserve-stock", `{"tenant_id":"t1","order_id":"o-r","sku":"s","quantity":1}`, "k-refused-o", 503, true},
	} {
		before := keySet(t, r.Redis())
		fault.on.Store(c.fault)
		resp, body := post(t, r, c.path, c.body, "Idempotency-Key", strconv.Quote(c.key))
		fault.on.Store(false)
		if resp.StatusCode != c.status {
			t.Fatalf("%s: %d %s", c.name, resp.StatusCode, body)
		}
		if after := keySet(t, r.Redis()); !slices.Equal(after, before) {
			t.Errorf("%s left keys: before %v, after %v", c.name, before, after)
		}
	}
}

// A replayed answer whose job has started (its dedup marker gone, so the speculative create makes
// a new job) leaves no second job.
func TestAReplayLeavesNoSecondJob(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAll, nil)
	body := `{"tenant_id":"t1","resource_id":"replayed"}`
	resp, first := post(t, r, "/jobs/rebuild-cache", body, "Idempotency-Key", `"k1"`)
	if resp.StatusCode != 202 {
		t.Fatal(resp.StatusCode, first)
	}
	var a jobAnswer
	if err := json.Unmarshal([]byte(first), &a); err != nil {
		t.Fatal(err)
	}
	waitJob(t, r, a.JobID, "done")
	records := func() []string {
		return slices.Sorted(slices.Values(r.Redis().Keys(context.Background(), "jobguard:*:job:*").Val()))
	}
	markers := func() []string { return r.Redis().Keys(context.Background(), "jobguard:*dedup*").Val() }
	before := records()
	resp, again := post(t, r, "/jobs/rebuild-cache", body, "Idempotency-Key", `"k1"`)
	if resp.StatusCode != 202 || again != first || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s", resp.StatusCode, again)
	}
	if after := records(); !slices.Equal(after, before) {
		t.Fatalf("the replay left job keys: before %v, after %v", before, after)
	}
	if m := markers(); len(m) != 0 {
		t.Fatalf("the replay left dedup keys %v", m)
	}
}

// A Redis that lost its scripts (restarted, failed over) answers the first pipeline's takes and
// claims NOSCRIPT: each is sent again alone, and the answers are as ever.
func TestEnqueueAfterRedisLostItsScripts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t) // its own server: the test flushes the script cache
	r := startApp(t, RoleAPI, map[string]string{"REDIS_URL": "redis://" + srv.Addr + "/0"})
	flush := func() {
		if err := r.Redis().ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	body := `{"tenant_id":"t1","resource_id":"r"}`
	flush()
	resp, first := post(t, r, "/jobs/rebuild-cache", body, "Idempotency-Key", `"k1"`)
	if resp.StatusCode != 202 || resp.Header.Get("RateLimit-Remaining") == "" {
		t.Fatalf("new job: %d %s %v", resp.StatusCode, first, resp.Header)
	}
	flush()
	resp, again := post(t, r, "/jobs/rebuild-cache", body, "Idempotency-Key", `"k1"`)
	if resp.StatusCode != 202 || again != first || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s", resp.StatusCode, again)
	}
	flush()
	spendBudget(t, r, "t2")
	before := keySet(t, r.Redis())
	resp, _ = post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t2","resource_id":"r"}`, "Idempotency-Key", `"k2"`)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("spent budget: %d %v", resp.StatusCode, resp.Header)
	}
	if after := keySet(t, r.Redis()); !slices.Equal(after, before) {
		t.Fatalf("the refused request left keys: before %v, after %v", before, after)
	}
}

// A take that fails in the create's pipeline lets the request through (fail open), without the
// RateLimit fields; for the next second the process takes the limit alone, and fails open there.
func TestAFailingTakeInThePipelineFailsOpen(t *testing.T) {
	t.Parallel()
	counter := &testsupport.RoundTrips{}
	r := startAppWith(t, RoleAPI, nil, func(a Process) { a.Redis().AddHook(counter) })
	// A budget key of the wrong type: the limit script's GET fails (WRONGTYPE), as a broken
	// limiter would.
	if err := r.Redis().HSet(context.Background(), "jobguard:{ratelimit:tenant:tf}", "x", "1").Err(); err != nil {
		t.Fatal(err)
	}
	// Warm up the scripts on another tenant, so the counts below are the requests' own.
	if resp, body := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"warm"}`, "Idempotency-Key", `"w"`); resp.StatusCode != 202 {
		t.Fatal(resp.StatusCode, body)
	}
	for i, want := range []int64{3, 4} { // in the pipeline; then alone first
		before := counter.N()
		resp, body := post(t, r, "/jobs/rebuild-cache", fmt.Sprintf(`{"tenant_id":"tf","resource_id":"r%d"}`, i), "Idempotency-Key", strconv.Quote(fmt.Sprint("k", i)))
		if resp.StatusCode != 202 || resp.Header.Get("RateLimit-Limit") != "" {
			t.Fatalf("request %d with a failing limiter: %d %s %v", i, resp.StatusCode, body, resp.Header)
		}
		if trips := counter.N() - before; trips != want {
			t.Errorf("request %d: %d round trips, want %d", i, trips, want)
		}
	}
}

// expiredConfirm makes the enqueue's confirmation (the first script of the pipeline that adds
// the job to the list indexes, {jobs} and {jobs:<tenant>}) arrive as if past its deadline, while on: its
// deadline argument (confirm.lua's ARGV[3]) is set to 1 ms after the epoch, so Redis answers
// "expired" and writes nothing, as it does for a confirmation a stalled Redis runs too late.
type expiredConfirm struct{ on atomic.Bool }

func (f *expiredConfirm) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (f *expiredConfirm) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (f *expiredConfirm) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if f.on.Load() && len(cmds) > 1 && strings.Contains(fmt.Sprint(cmds[1].Args()...), "{jobs") {
			if args := cmds[0].Args(); len(args) == 11 && args[2] == 4 { // EVAL, script, 4 keys, 4 arguments
				args[9] = 1
			}
		}
		return next(ctx, cmds)
	}
}

// An order whose confirmation reached Redis after the request's deadline was answered "nothing
// was kept": its identity claim goes too, so the same order with other content is accepted later.
// Before the fix the claim stayed (it counted as kept once the confirmation had been queued) and
// that request got 409.
func TestAnExpiredConfirmationKeepsNoOrderClaim(t *testing.T) {
	t.Parallel()
	expire := &expiredConfirm{}
	r := startAppWith(t, RoleAPI, nil, func(a Process) { a.Redis().AddHook(expire) })
	expire.on.Store(true)
	resp, body := post(t, r, "/jobs/reserve-stock", `{"tenant_id":"t1","order_id":"o-stall","sku":"s","quantity":1}`)
	expire.on.Store(false)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a confirmation past the deadline: %d %s", resp.StatusCode, body)
	}
	testsupport.Eventually(t, 5*time.Second, "the order's claim released", func() bool {
		return r.Redis().Exists(context.Background(), "jobguard:{order:t1:o-stall}").Val() == 0
	})
	if resp, body := post(t, r, "/jobs/reserve-stock", `{"tenant_id":"t1","order_id":"o-stall","sku":"s","quantity":2}`); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("the order with other content after the 503: %d %s", resp.StatusCode, body)
	}
}
