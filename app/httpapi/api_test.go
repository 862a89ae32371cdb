package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
	"github.com/jobguard/jobguard/locking"
	"github.com/jobguard/jobguard/tasks/registry"
)

const (
	tokenA = "token-a-0123456789"
	tokenB = "token-b-0123456789"
)

var twoTenants = map[string]string{"API_TOKENS": tokenA + ":t1," + tokenB + ":t2"}

func bearer(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

func post(t *testing.T, r *running, path, body string, header ...string) (*http.Response, string) {
	t.Helper()
	h := append([]string{"Content-Type", "application/json"}, header...)
	return do(t, http.MethodPost, r.base+path, body, h...)
}

// jobKeys counts jobguard's keys but the limiter's buckets (which every request spends and which
// expire on their own, sooner or later as the machine is slower), to show a rejected request left
// nothing behind.
func jobKeys(r *running) int { return stateKeys(r.Redis()) }

func TestEnqueueAnswers(t *testing.T) {
	t.Parallel()
	// No worker: jobs stay queued. A small body limit keeps the oversized request under the HTTP
	// client's 4 KiB write buffer, so it is sent in one write before the server answers 413 and
	// closes (a larger one can meet a closed connection halfway: broken pipe, no answer).
	r := startApp(t, RoleAPI, map[string]string{"API_TOKENS": twoTenants["API_TOKENS"], "BODY_LIMIT": "1024"})
	rebuild := `{"tenant_id":"t1","resource_id":"home"}`
	resp, body := post(t, r, "/jobs/rebuild-cache", rebuild, bearer(tokenA)...)
	var first jobAnswer
	_ = json.Unmarshal([]byte(body), &first)
	if resp.StatusCode != 202 || first.Status != "queued" || first.Deduplicated || resp.Header.Get("Location") != "/jobs/"+first.JobID {
		t.Fatalf("new job: %d %s %v", resp.StatusCode, body, resp.Header)
	}
	resp, body = post(t, r, "/jobs/rebuild-cache", rebuild, bearer(tokenA)...)
	var again jobAnswer
	_ = json.Unmarshal([]byte(body), &again)
	if resp.StatusCode != 200 || again.JobID != first.JobID || !again.Deduplicated {
		t.Fatalf("duplicate: %d %s", resp.StatusCode, body)
	}

	before := jobKeys(r)
	for _, tc := range []struct {
		name, path, body string
		header           []string
		status           int
		field            string
	}{
		{"no token", "/jobs/rebuild-cache", rebuild, nil, 401, "Authorization"},
		{"unknown token", "/jobs/rebuild-cache", rebuild, bearer("nope-nope-nope-nope"), 401, "Authorization"},
		{"other tenant's body", "/jobs/rebuild-cache", `{"tenant_id":"t2","resource_id":"home"}`, bearer(tokenA), 403, "tenant_id"},
		{"unknown field", "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"a","x":1}`, bearer(tokenA), 400, "x"},
		{"wrong type", "/jobs/reserve-stock", `{"tenant_id":"t1","order_id":"o","sku":"s","quantity":"3"}`, bearer(tokenA), 400, "quantity"},
		{"missing field", "/jobs/reserve-stock", `{"tenant_id":"t1","order_id":"o","quantity":3}`, bearer(tokenA), 400, "sku"},
		{"bad charset", "/jobs/reserve-stock", `{"tenant_id":"t1","order_id":"o/1","sku":"s","quantity":3}`, bearer(tokenA), 400, "order_id"},
		{"too long", "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"` + strings.Repeat("r", 129) + `"}`, bearer(tokenA), 400, "resource_id"},
		{"quantity 0", "/jobs/reserve-stock", `{"tenant_id":"t1","order_id":"o","sku":"s","quantity":0}`, bearer(tokenA), 400, "quantity"},
		{"quantity too big", "/jobs/reserve-stock", `{"tenant_id":"t1","order_id":"o","sku":"s","quantity":1000001}`, bearer(tokenA), 400, "quantity"},
		{"two objects", "/jobs/rebuild-cache", rebuild + rebuild, bearer(tokenA), 400, "body"},
		{"not json", "/jobs/rebuild-cache", `tenant_id=t1`, bearer(tokenA), 400, "body"},
		{"wrong content type", "/jobs/rebuild-cache", rebuild, append(bearer(tokenA), "Content-Type", "text/plain"), 415, "Content-Type"},
		{"malformed key", "/jobs/rebuild-cache", rebuild, append(bearer(tokenA), "Idempotency-Key", `"unterminated`), 400, "Idempotency-Key"},
		{"key too long", "/jobs/rebuild-cache", rebuild, append(bearer(tokenA), "Idempotency-Key", `"`+strings.Repeat("k", 256)+`"`), 400, "Idempotency-Key"},
		{"empty key", "/jobs/rebuild-cache", rebuild, append(bearer(tokenA), "Idempotency-Key", `""`), 400, "Idempotency-Key"},
		{"bare keys joined without a space", "/jobs/rebuild-cache", rebuild, append(bearer(tokenA), "Idempotency-Key", `a,b`), 400, "Idempotency-Key"},
		{"bare key with a parameter", "/jobs/rebuild-cache", rebuild, append(bearer(tokenA), "Idempotency-Key", `a;p=1`), 400, "Idempotency-Key"},
	} {
		resp, body := post(t, r, tc.path, tc.body, tc.header...)
		p := decodeProblem(t, resp, body)
		if p.Status != tc.status || p.Field != tc.field {
			t.Errorf("%s: %d field %q (%s), want %d field %q", tc.name, p.Status, p.Field, p.Detail, tc.status, tc.field)
		}
	}
	resp, body = post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"`+strings.Repeat("x", 2048)+`"}`, bearer(tokenA)...)
	if p := decodeProblem(t, resp, body); p.Status != 413 {
		t.Errorf("oversized: %+v", p)
	}
	if after := jobKeys(r); after != before {
		t.Fatalf("rejected requests left %d keys", after-before)
	}
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, twoTenants)
	order := `{"tenant_id":"t1","order_id":"o-1","sku":"s","quantity":2}`
	key := append(bearer(tokenA), "Idempotency-Key", `"order-1-attempt"`)
	resp, first := post(t, r, "/jobs/reserve-stock", order, key...)
	if resp.StatusCode != 202 || resp.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %s", resp.StatusCode, first)
	}
	resp, second := post(t, r, "/jobs/reserve-stock", order, key...)
	if resp.StatusCode != 202 || second != first || resp.Header.Get("Idempotent-Replayed") != "true" || resp.Header.Get("Location") == "" {
		t.Fatalf("replay: %d %s %v", resp.StatusCode, second, resp.Header)
	}
	// A bare token is the same key as its sf-string form.
	resp, third := post(t, r, "/jobs/reserve-stock", order, append(bearer(tokenA), "Idempotency-Key", "order-1-attempt")...)
	if resp.StatusCode != 202 || third != first {
		t.Fatalf("bare token: %d %s", resp.StatusCode, third)
	}
	resp, body := post(t, r, "/jobs/reserve-stock", `{"tenant_id":"t1","order_id":"o-2","sku":"s","quantity":2}`, key...)
	if p := decodeProblem(t, resp, body); p.Status != 422 || p.Field != "Idempotency-Key" {
		t.Fatalf("other body, same key: %+v", p)
	}
	// Keys are per tenant: t2 may use the same key for its own request.
	resp, _ = post(t, r, "/jobs/reserve-stock", `{"tenant_id":"t2","order_id":"o-1","sku":"s","quantity":2}`,
		append(bearer(tokenB), "Idempotency-Key", `"order-1-attempt"`)...)
	if resp.StatusCode != 202 {
		t.Fatalf("other tenant, same key: %d", resp.StatusCode)
	}
	// A key whose first request is still running answers 409.
	idem := idempotency{rdb: r.Redis(), prefix: "jobguard", retention: time.Hour}
	if _, _, err := idem.begin(context.Background(), "t1", "in-flight", fingerprint("POST", "/jobs/reserve-stock", []byte(order))); err != nil {
		t.Fatal(err)
	}
	resp, body = post(t, r, "/jobs/reserve-stock", order, append(bearer(tokenA), "Idempotency-Key", `"in-flight"`)...)
	if p := decodeProblem(t, resp, body); p.Status != 409 || p.Code != problem.CodeIdempotencyInFlight {
		t.Fatalf("in flight: %+v", p)
	}
	// A deduplicated answer is stored like a new job's: the same key gets it again.
	rebuild := `{"tenant_id":"t1","resource_id":"dup"}`
	if resp, _ := post(t, r, "/jobs/rebuild-cache", rebuild, bearer(tokenA)...); resp.StatusCode != 202 {
		t.Fatalf("rebuild: %d", resp.StatusCode)
	}
	dupKey := append(bearer(tokenA), "Idempotency-Key", `"rebuild-dup"`)
	resp, dup := post(t, r, "/jobs/rebuild-cache", rebuild, dupKey...)
	if resp.StatusCode != 200 || !strings.Contains(dup, `"deduplicated":true`) {
		t.Fatalf("duplicate with a key: %d %s", resp.StatusCode, dup)
	}
	resp, again := post(t, r, "/jobs/rebuild-cache", rebuild, dupKey...)
	if resp.StatusCode != 200 || again != dup || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replayed duplicate: %d %s %v", resp.StatusCode, again, resp.Header)
	}
	ttl := r.Redis().PTTL(context.Background(), idem.recordKey("t1", "order-1-attempt")).Val()
	if ttl < 23*time.Hour || ttl > 24*time.Hour {
		t.Fatalf("stored answer TTL %s, want IDEMPOTENCY_RETENTION (24h)", ttl)
	}
}

// concurrently sends n requests at once and returns their statuses and bodies.
func concurrently(t *testing.T, r *running, n int, path, body string, header ...string) ([]int, []string) {
	codes, bodies := make([]int, n), make([]string, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			resp, b := post(t, r, path, body, header...)
			codes[i], bodies[i] = resp.StatusCode, b
		}(i)
	}
	wg.Wait()
	return codes, bodies
}

func TestHundredIdenticalRebuildsAreOneJob(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, nil)
	codes, bodies := concurrently(t, r, 100, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"hot"}`)
	ids := map[string]int{}
	created := 0
	for i, b := range bodies {
		var a jobAnswer
		_ = json.Unmarshal([]byte(b), &a)
		ids[a.JobID]++
		if codes[i] == 202 {
			created++
		} else if codes[i] != 200 || !a.Deduplicated {
			t.Fatalf("answer %d: %d %s", i, codes[i], b)
		}
	}
	if len(ids) != 1 || created != 1 {
		t.Fatalf("%d jobs, %d created", len(ids), created)
	}
}

func TestHundredRequestsWithOneIdempotencyKey(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, nil)
	order := `{"tenant_id":"t1","order_id":"o-9","sku":"s","quantity":1}`
	codes, bodies := concurrently(t, r, 100, "/jobs/reserve-stock", order, "Idempotency-Key", `"same"`)
	var first string
	for i, code := range codes {
		switch code {
		case 202:
			if first == "" {
				first = bodies[i]
			} else if bodies[i] != first {
				t.Fatalf("two different answers: %s and %s", first, bodies[i])
			}
		case 409:
		default:
			t.Fatalf("answer %d: %d %s", i, code, bodies[i])
		}
	}
	if first == "" {
		t.Fatal("no request succeeded")
	}
	jobs := 0
	for _, k := range r.Redis().Keys(context.Background(), "jobguard:*:job:*").Val() {
		if !strings.HasSuffix(k, ":timeline") {
			jobs++
		}
	}
	if jobs != 1 {
		t.Fatalf("%d jobs for one idempotency key", jobs)
	}
	// The losers' speculative creates were abandoned: no flag of an unconfirmed job is left, and
	// the key holds the one stored answer.
	if pending := r.Redis().Keys(context.Background(), "jobguard:*dedup-pending*").Val(); len(pending) != 0 {
		t.Fatalf("pending flags left: %v", pending)
	}
	if idem := r.Redis().Keys(context.Background(), "jobguard:{idem:*").Val(); len(idem) != 1 {
		t.Fatalf("Idempotency-Key records: %v", idem)
	}
}

func getJSON(t *testing.T, r *running, path string, out any, header ...string) int {
	t.Helper()
	resp, body := get(t, r.base+path, header...)
	if out != nil {
		_ = json.Unmarshal([]byte(body), out)
	}
	return resp.StatusCode
}

func waitJob(t *testing.T, r *running, id, status string, header ...string) jobView {
	t.Helper()
	var v jobView
	testsupport.Eventually(t, 20*time.Second, "job "+id+" "+status, func() bool {
		v = jobView{}
		getJSON(t, r, "/jobs/"+id, &v, header...)
		return v.Status == status
	})
	return v
}

// End to end: orders submitted many times, concurrently and after completion, are reserved once;
// the job view, the read models and tenant isolation work on real jobs.
func TestReserveStockEndToEnd(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAll, twoTenants)
	order := `{"tenant_id":"t1","order_id":"o-1","sku":"sku-1","quantity":5}`
	_, bodies := concurrently(t, r, 20, "/jobs/reserve-stock", order, bearer(tokenA)...)
	// until_done: duplicates that arrive after a job ended start another, which finds the order
	// applied. Wait for every job the answers name.
	var a jobAnswer
	ids := map[string]bool{}
	for _, b := range bodies {
		_ = json.Unmarshal([]byte(b), &a)
		ids[a.JobID] = true
	}
	var v jobView
	for id := range ids {
		if w := waitJob(t, r, id, "done", bearer(tokenA)...); w.Result != "already_applied" {
			v = w // the one job that applied the order
		}
	}
	if v.Attempt != 1 || v.Fencing < 1 || v.Lease.CurrentFence < 1 || len(v.Deliveries) != 1 || !v.Deliveries[0].Current || len(v.Timeline) < 3 {
		t.Fatalf("job view %+v", v)
	}
	resp, body := post(t, r, "/jobs/reserve-stock", order, bearer(tokenA)...)
	_ = json.Unmarshal([]byte(body), &a)
	if resp.StatusCode != 202 {
		t.Fatalf("resubmission after done: %d %s", resp.StatusCode, body)
	}
	if v := waitJob(t, r, a.JobID, "done", bearer(tokenA)...); v.Result != "already_applied" {
		t.Fatalf("resubmission: %+v", v)
	}
	var s struct {
		Reserved      int64 `json:"reserved"`
		OrdersApplied int64 `json:"orders_applied"`
	}
	if code := getJSON(t, r, "/stock/t1/sku-1", &s, bearer(tokenA)...); code != 200 || s.Reserved != 5 || s.OrdersApplied != 1 {
		t.Fatalf("stock %d %+v", code, s)
	}
	if code := getJSON(t, r, "/jobs/"+a.JobID, nil, bearer(tokenB)...); code != 404 {
		t.Fatalf("another tenant's job: %d", code)
	}
	if code := getJSON(t, r, "/stock/t1/sku-1", nil, bearer(tokenB)...); code != 403 {
		t.Fatalf("another tenant's stock: %d", code)
	}
	if code := getJSON(t, r, "/stock/t1/sku{1}", nil, bearer(tokenA)...); code != 400 {
		t.Fatalf("bad sku: %d", code)
	}
	for _, id := range []string{"nope", "0123456789abcdef-00000000000000000000000000ff"} {
		if code := getJSON(t, r, "/jobs/"+id, nil, bearer(tokenA)...); code != 404 {
			t.Fatalf("job %s: %d", id, code)
		}
	}
	resp, body = post(t, r, "/jobs/"+a.JobID+"/retry", "", bearer(tokenA)...)
	if p := decodeProblem(t, resp, body); p.Status != 409 || p.Code != problem.CodeJobNotFailed {
		t.Fatalf("retry of a done job: %+v", p)
	}
}

func TestRetryEndpointReplaysAFailedJob(t *testing.T) {
	t.Parallel()
	var healthy sync.Map
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := healthy.Load("up"); !ok {
			w.WriteHeader(http.StatusNotFound) // permanent: the job fails at once
			return
		}
		fmt.Fprint(w, "fresh")
	}))
	defer upstream.Close()
	r := startApp(t, RoleAll, map[string]string{"REBUILD_SOURCE_URL": upstream.URL})
	resp, body := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"page"}`)
	var a jobAnswer
	_ = json.Unmarshal([]byte(body), &a)
	if resp.StatusCode != 202 {
		t.Fatal(resp.StatusCode, body)
	}
	waitJob(t, r, a.JobID, "failed")
	if code := getJSON(t, r, "/cache/t1/page", nil); code != 404 {
		t.Fatalf("cache before success: %d", code)
	}
	healthy.Store("up", true)
	resp, body = post(t, r, "/jobs/"+a.JobID+"/retry", "")
	if resp.StatusCode != 202 || resp.Header.Get("Location") != "/jobs/"+a.JobID {
		t.Fatalf("retry: %d %s", resp.StatusCode, body)
	}
	v := waitJob(t, r, a.JobID, "done")
	if len(v.Deliveries) != 2 || !v.Deliveries[1].Current || v.Attempt != 1 {
		t.Fatalf("after replay: %+v", v)
	}
	var c struct{ Value string }
	if code := getJSON(t, r, "/cache/t1/page", &c); code != 200 || c.Value != "fresh" {
		t.Fatalf("cache: %d %+v", code, c)
	}
}

// FuzzEnqueue: whatever the body and headers, the API never answers 5xx, and a rejected request
// leaves no key behind.
func FuzzEnqueue(f *testing.F) {
	f.Add("/jobs/reserve-stock", `{"tenant_id":"t1","order_id":"o","sku":"s","quantity":1}`, "application/json", `"k1"`)
	f.Add("/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"r"}`, "application/json; charset=utf-8", "")
	f.Add("/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"r","resource_id":"s"}`, "application/json", `bare`)
	f.Add("/jobs/reserve-stock", `{"quantity":1e99}`, "application/json", `"\"esc\\"`)
	f.Add("/jobs/reserve-stock", `[]`, "text/json", "\x00")
	db := redistest.NewDB(f)
	cfg, err := config.FromLookup(lookupFrom(map[string]string{"REDIS_URL": db.URL(), "HTTP_ADDR": "127.0.0.1:0"}), registry.All())
	if err != nil {
		f.Fatal(err)
	}
	a, err := newProcess(context.Background(), cfg, RoleAPI, nopLogger())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(a.Close)
	f.Fuzz(func(t *testing.T, path, body, contentType, idemKey string) {
		if !strings.HasPrefix(path, "/jobs/") || strings.ContainsAny(path, " ?#%") {
			return
		}
		if _, err := url.ParseRequestURI(path); err != nil {
			return // not a request line any client could send
		}
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		if idemKey != "" {
			req.Header.Set("Idempotency-Key", idemKey)
		}
		before := stateKeys(db.Client)
		resp, err := a.API().http.Test(req, -1)
		if err != nil {
			return // the request could not even be written (invalid header bytes)
		}
		respBody, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err := checkExchange(req, []byte(body), resp, respBody, false); err != nil {
			t.Fatalf("%s %q: openapi.json: %v", path, body, err)
		}
		if resp.StatusCode >= 500 {
			t.Fatalf("%s %q: %d", path, body, resp.StatusCode)
		}
		if resp.StatusCode >= 400 {
			if after := stateKeys(db.Client); after != before {
				t.Fatalf("%s %q answered %d and left %d keys", path, body, resp.StatusCode, after-before)
			}
		}
	})
}

func nopLogger() zerolog.Logger { return zerolog.Nop() }

// A duplicate of a job whose enqueue was never confirmed (its API process died between create and
// asynq's answer) gets 503 with Retry-After, not that job's id, and its Idempotency-Key is free
// again for the retry.
func TestDuplicateOfAnUnconfirmedJobIs503(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, nil)
	locks := locking.New(r.Redis(), locking.WithPrefix("jobguard"))
	tag := engine.ResourceTag("t1:home")
	dead := engine.NewJobID("t1:home", time.Now())
	for _, name := range []string{"dedup:rebuild", "dedup-pending:rebuild"} {
		r.Redis().Set(context.Background(), locks.Key(tag, name), dead, time.Minute)
	}
	body := `{"tenant_id":"t1","resource_id":"home"}`
	resp, text := post(t, r, "/jobs/rebuild-cache", body, "Idempotency-Key", `"k1"`)
	if p := decodeProblem(t, resp, text); p.Status != 503 || p.Code != problem.CodeDedupPending || resp.Header.Get("Retry-After") != "1" || strings.Contains(text, dead) {
		t.Fatalf("duplicate of an unconfirmed job: %+v %v", p, resp.Header)
	}
	idem := idempotency{rdb: r.Redis(), prefix: "jobguard"}
	if n := r.Redis().Exists(context.Background(), idem.recordKey("t1", "k1")).Val(); n != 0 {
		t.Fatal("the Idempotency-Key was kept after a 503")
	}
}
