package httpapi

import (
	"context"
	encjson "encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// stallAnswer is one request sent while Redis was stalled.
type stallAnswer struct {
	what        string
	status      int
	contentType string
	retryAfter  string
	body        string
	took        time.Duration
	err         error
}

// timedRequest sends one request on its own connection and measures how long the answer took.
func timedRequest(method, url, body string, header ...string) stallAnswer {
	a := stallAnswer{what: method + " " + url}
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		a.err = err
		return a
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		a.err, a.took = err, time.Since(start)
		return a
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	a.took, a.body = time.Since(start), string(b)
	a.status, a.contentType, a.retryAfter = resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Retry-After")
	return a
}

// TestRedisStall stalls Redis (SIGSTOP) for longer than the request deadline: every request
// answers within the deadline plus 1 s with a 503 problem+json and Retry-After, and once Redis
// runs again no request answered 503 leaves a job behind: no record without a delivery, nothing
// run for it.
func TestRedisStall(t *testing.T) {
	t.Parallel()
	const deadline = time.Second
	srv := redistest.Start(t)
	r := startApp(t, RoleAll, map[string]string{
		"REDIS_URL": "redis://" + srv.Addr + "/0", "REQUEST_TIMEOUT": deadline.String(), "LEASE_TTL": "2s",
		"MONITORING_READONLY": "false",
	})
	json := "application/json"
	resp, body := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"before"}`)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("enqueue before the stall: %d %s", resp.StatusCode, body)
	}
	var ans jobAnswer
	if err := encjson.Unmarshal([]byte(body), &ans); err != nil {
		t.Fatal(err)
	}
	id := ans.JobID
	waitJob(t, r, id, "done")

	resume := srv.Stall(t)
	stalledAt := time.Now()

	type call struct{ method, path, body, key string }
	var calls []call
	for i := range 6 {
		c := call{method: http.MethodPost, path: "/jobs/rebuild-cache", body: fmt.Sprintf(`{"tenant_id":"t1","resource_id":"stall-%d"}`, i)}
		if i%2 == 1 {
			c.key = fmt.Sprintf("stall-key-%d", i)
		}
		calls = append(calls, c)
	}
	calls = append(calls,
		call{method: http.MethodPost, path: "/jobs/reserve-stock", body: `{"tenant_id":"t1","order_id":"stall-o1","sku":"stall-s1","quantity":1}`},
		call{method: http.MethodGet, path: "/jobs/" + id},
		call{method: http.MethodPost, path: "/jobs/" + id + "/retry"},
		call{method: http.MethodGet, path: "/stock/t1/s1"},
		call{method: http.MethodGet, path: "/cache/t1/before"},
		call{method: http.MethodGet, path: "/readyz"},
		call{method: http.MethodGet, path: "/monitoring/api/queues"},
		call{method: http.MethodPost, path: "/monitoring/api/queues/default:pause", key: "ui"},
	)
	answers := make([]stallAnswer, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := []string{"Content-Type", json}
			if c.key == "ui" {
				h = append(h, "Origin", r.base)
			} else if c.key != "" {
				h = append(h, "Idempotency-Key", c.key)
			}
			answers[i] = timedRequest(c.method, r.base+c.path, c.body, h...)
		}()
	}
	scrape := timedRequest(http.MethodGet, r.base+"/metrics", "")
	wg.Wait()
	if scrape.status != http.StatusOK || scrape.took > deadline+time.Second {
		t.Errorf("/metrics during the stall: %d after %s", scrape.status, scrape.took)
	}
	if stalled := time.Since(stalledAt); stalled < deadline {
		t.Fatalf("the stall lasted only %s", stalled)
	}
	// Keep Redis stopped past the deadline of every request, then let it run.
	time.Sleep(time.Until(stalledAt.Add(3 * deadline)))
	resume()

	for _, a := range answers {
		switch {
		case a.err != nil:
			t.Errorf("%s: %v after %s", a.what, a.err, a.took)
		case a.took > deadline+time.Second:
			t.Errorf("%s: answered %d after %s, more than the deadline %s plus 1s", a.what, a.status, a.took.Round(time.Millisecond), deadline)
		case a.status != http.StatusServiceUnavailable || !strings.HasPrefix(a.contentType, problem.ContentType) || a.retryAfter == "":
			t.Errorf("%s: answered %d %q Retry-After %q after %s; want 503 problem+json with Retry-After", a.what, a.status, a.contentType, a.retryAfter, a.took.Round(time.Millisecond))
		}
	}

	// Nothing answered 503 may exist later: no record, no cache entry, no reservation.
	rdb := r.Redis()
	ctx := context.Background()
	insp := asynq.NewInspectorFromRedisClient(rdb)
	orphans := func() []string {
		var bad []string
		keys, err := rdb.Keys(ctx, "jobguard:*:job:*").Result()
		if err != nil {
			return []string{err.Error()}
		}
		for _, k := range keys {
			if strings.HasSuffix(k, ":timeline") {
				continue
			}
			rec := rdb.HGetAll(ctx, k).Val()
			if rec["status"] == "done" || rec["status"] == "failed" || rec["status"] == "" {
				continue
			}
			if _, err := insp.GetTaskInfo(rec["queue"], rec["delivery"]); err != nil {
				bad = append(bad, fmt.Sprintf("%s (%s, delivery %s: %v)", k, rec["status"], rec["delivery"], err))
			}
		}
		return bad
	}
	testsupport.Eventually(t, 35*time.Second, "no job record without a delivery", func() bool { return len(orphans()) == 0 })
	// Give anything left a chance to run, then look for ghosts of the refused requests.
	time.Sleep(3 * time.Second)
	if o := orphans(); len(o) > 0 {
		t.Errorf("job records without a delivery: %v", o)
	}
	for i := range 6 {
		if n := rdb.Keys(ctx, "jobguard:{"+engine.ResourceTag(fmt.Sprintf("t1:stall-%d", i))+"}:*").Val(); len(n) > 0 {
			t.Errorf("request for stall-%d was answered 503 but left %v", i, n)
		}
	}
	if n := rdb.Keys(ctx, "jobguard:{"+engine.ResourceTag("t1:stall-s1")+"}:*").Val(); len(n) > 0 {
		t.Errorf("the reserve-stock request answered 503 left %v", n)
	}
	if p, err := insp.GetQueueInfo("default"); err == nil && p.Paused {
		t.Errorf("the UI's pause answered 503 but paused the queue")
	}
	_ = insp.Close()
}

// TestRedisDown kills Redis: every route that needs it answers a fast 503 problem+json with
// Retry-After (the UI's API too, without the raw dial error; in text to asynqmon's page), and the
// process answers /healthz.
// Fast is within 10 REQUEST_TIMEOUTs: 2 s failed once at load 15-22; a hang meets the client's 30 s.
func TestRedisDown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	r := startApp(t, RoleAll, map[string]string{"REDIS_URL": "redis://" + srv.Addr + "/0", "REQUEST_TIMEOUT": "1s"})
	resp, body := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"before"}`)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("enqueue before the outage: %d %s", resp.StatusCode, body)
	}
	var ans jobAnswer
	if err := encjson.Unmarshal([]byte(body), &ans); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	for _, c := range []struct{ method, path, body string }{
		{http.MethodPost, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"down"}`},
		{http.MethodGet, "/jobs/" + ans.JobID, ""},
		{http.MethodPost, "/jobs/" + ans.JobID + "/retry", ""},
		{http.MethodGet, "/cache/t1/before", ""},
		{http.MethodGet, "/stock/t1/s1", ""},
		{http.MethodGet, "/readyz", ""},
		{http.MethodGet, "/monitoring/api/queues", ""},
		{http.MethodPost, "/monitoring/api/queues/default:pause", ""},
	} {
		a := timedRequest(c.method, r.base+c.path, c.body, "Content-Type", "application/json", "Origin", r.base)
		if a.err != nil || a.status != http.StatusServiceUnavailable || !strings.HasPrefix(a.contentType, problem.ContentType) ||
			a.retryAfter == "" || a.took > 10*time.Second {
			t.Errorf("%s with Redis down: %d %q Retry-After %q after %s (%v); want a fast 503 problem+json", a.what, a.status, a.contentType, a.retryAfter, a.took, a.err)
		}
	}
	// asynqmon's page renders an error's body as text (an object parsed from JSON blanked it):
	// its client, which takes text, gets the detail as text, with the same status and Retry-After.
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		a := timedRequest(method, r.base+"/monitoring/api/queues/default:pause", "", "Origin", r.base,
			"Accept", "application/json, text/plain, */*")
		if method == http.MethodGet {
			a = timedRequest(method, r.base+"/monitoring/api/queues", "", "Accept", "application/json, text/plain, */*")
		}
		if a.err != nil || a.status != http.StatusServiceUnavailable || !strings.HasPrefix(a.contentType, "text/plain") ||
			a.retryAfter == "" || !strings.Contains(a.body, "Redis") || strings.Contains(a.body, "{") {
			t.Errorf("%s with Redis down, for asynqmon's page: %d %q Retry-After %q %q (%v); want a 503 in text", a.what, a.status, a.contentType, a.retryAfter, a.body, a.err)
		}
	}
	// A client that names problem+json gets it, text or not.
	a := timedRequest(http.MethodGet, r.base+"/monitoring/api/queues", "", "Accept", "text/plain, application/problem+json")
	if a.status != http.StatusServiceUnavailable || !strings.HasPrefix(a.contentType, problem.ContentType) {
		t.Errorf("%s with Redis down, asking for problem+json: %d %q", a.what, a.status, a.contentType)
	}
	if resp, _ := get(t, r.base+"/healthz"); resp.StatusCode != http.StatusOK {
		t.Errorf("healthz with Redis down: %d", resp.StatusCode)
	}
	// A scrape still answers, at once, and says Redis is down.
	start := time.Now()
	resp, body = get(t, r.base+"/metrics")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "jobguard_redis_up 0") || time.Since(start) > 10*time.Second {
		t.Errorf("/metrics with Redis down: %d after %s, redis_up 0: %v", resp.StatusCode, time.Since(start), strings.Contains(body, "jobguard_redis_up 0"))
	}
	// Back up, the process serves again without a restart (and go-redis's redial loop ends).
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 10*time.Second, "ready again", func() bool {
		return timedRequest(http.MethodGet, r.base+"/readyz", "").status == http.StatusOK
	})
}

// A bulk sent while Redis is stalled tells its client when to send it again: each item is refused
// with a 5xx problem and the answer carries Retry-After (or, refused before its items, it is a 503
// problem with Retry-After).
func TestBulkDuringRedisStallSaysWhenToRetry(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	r := startApp(t, RoleAPI, map[string]string{"REDIS_URL": "redis://" + srv.Addr + "/0", "REQUEST_TIMEOUT": "1s"})
	if resp, body := post(t, r, "/jobs/rebuild-cache/bulk", `{"items":[{"tenant_id":"t1","resource_id":"warm"}]}`); resp.StatusCode != 200 {
		t.Fatalf("bulk before the stall: %d %s", resp.StatusCode, body)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Resume() }()
	a := timedRequest(http.MethodPost, r.base+"/jobs/rebuild-cache/bulk",
		`{"items":[{"tenant_id":"t1","resource_id":"stall-a"},{"tenant_id":"t1","resource_id":"stall-b"}]}`, "Content-Type", "application/json")
	if a.err != nil || a.retryAfter == "" {
		t.Fatalf("bulk during the stall: %d %v Retry-After %q: %s", a.status, a.err, a.retryAfter, a.body)
	}
	switch a.status {
	case http.StatusServiceUnavailable:
		if !strings.HasPrefix(a.contentType, problem.ContentType) {
			t.Fatalf("a 503 bulk that is not a problem: %q %s", a.contentType, a.body)
		}
	case http.StatusOK:
		var b bulkAnswer
		if err := encjson.Unmarshal([]byte(a.body), &b); err != nil || b.Refused != 2 || b.Items[0].Status < 500 || b.Items[1].Status < 500 {
			t.Fatalf("bulk during the stall: %s", a.body)
		}
	default:
		t.Fatalf("bulk during the stall: %d %s", a.status, a.body)
	}
}
