package httpapi

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/locking"
)

// A bulk with an Idempotency-Key is answered as the single route is: the same key and body get
// the first answer again (Idempotent-Replayed) and create nothing more; another body, or the same
// body in the other mode, is 422; all-or-nothing bulks replay too.
func TestBulkIdempotencyKey(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, twoTenants)
	body := `{"items":[{"tenant_id":"t1","resource_id":"ik1"},{"tenant_id":"t1","resource_id":"ik2"}]}`
	key := append(bearer(tokenA), "Idempotency-Key", `"bulk-1"`)
	resp, first := post(t, r, "/jobs/rebuild-cache/bulk", body, key...)
	var a bulkAnswer
	if err := json.Unmarshal([]byte(first), &a); err != nil || resp.StatusCode != 200 || a.Created != 2 ||
		resp.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %s", resp.StatusCode, first)
	}
	keys := jobKeys(r)
	resp, second := post(t, r, "/jobs/rebuild-cache/bulk", body, key...)
	if resp.StatusCode != 200 || second != first || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s %v", resp.StatusCode, second, resp.Header)
	}
	if n := jobKeys(r); n != keys {
		t.Fatalf("the replay kept %d keys more", n-keys)
	}
	other := `{"items":[{"tenant_id":"t1","resource_id":"ik3"}]}`
	resp, out := post(t, r, "/jobs/rebuild-cache/bulk", other, key...)
	if p := decodeProblem(t, resp, out); p.Status != 422 || p.Field != "Idempotency-Key" || p.Code != problem.CodeIdempotencyKeyReused {
		t.Fatalf("other body, same key: %+v", p)
	}
	resp, out = post(t, r, "/jobs/rebuild-cache/bulk?atomic=true", body, key...)
	if p := decodeProblem(t, resp, out); p.Status != 422 || p.Field != "Idempotency-Key" {
		t.Fatalf("same body in atomic mode, same key: %+v", p)
	}

	atomicBody := `{"atomic":true,"items":[{"tenant_id":"t1","resource_id":"ik4"},{"tenant_id":"t1","resource_id":"ik5"}]}`
	akey := append(bearer(tokenA), "Idempotency-Key", `"bulk-atomic"`)
	resp, afirst := post(t, r, "/jobs/rebuild-cache/bulk", atomicBody, akey...)
	a = bulkAnswer{}
	if err := json.Unmarshal([]byte(afirst), &a); err != nil || resp.StatusCode != 200 || !a.Atomic || a.Created != 2 {
		t.Fatalf("atomic first: %d %s", resp.StatusCode, afirst)
	}
	resp, asecond := post(t, r, "/jobs/rebuild-cache/bulk", atomicBody, akey...)
	if resp.StatusCode != 200 || asecond != afirst || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("atomic replay: %d %s", resp.StatusCode, asecond)
	}
	// An atomic bulk refused as a whole (a bad item) is a stored answer too: the same request
	// gets it again, and nothing was created either time.
	refused := `{"atomic":true,"items":[{"tenant_id":"t1","resource_id":"ik6"},{"tenant_id":"t1"}]}`
	rkey := append(bearer(tokenA), "Idempotency-Key", `"bulk-refused"`)
	resp, rfirst := post(t, r, "/jobs/rebuild-cache/bulk", refused, rkey...)
	keys = jobKeys(r) // the stored answer is one key
	resp2, rsecond := post(t, r, "/jobs/rebuild-cache/bulk", refused, rkey...)
	a = bulkAnswer{}
	if err := json.Unmarshal([]byte(rfirst), &a); err != nil || resp.StatusCode != 200 || a.Created != 0 || a.Refused != 2 ||
		resp2.StatusCode != 200 || rsecond != rfirst || resp2.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("refused atomic: %d %s / %d %s", resp.StatusCode, rfirst, resp2.StatusCode, rsecond)
	}
	if n := jobKeys(r); n != keys {
		t.Fatalf("the replay of a refused atomic bulk kept %d keys", n-keys)
	}
}

// Two bulks with the same key at once: one creates, the other is answered 409 (in flight) or
// with the first's answer; the jobs are created once.
func TestBulkIdempotencyKeyConcurrent(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, twoTenants)
	body := `{"items":[{"tenant_id":"t1","resource_id":"cc1"},{"tenant_id":"t1","resource_id":"cc2"},{"tenant_id":"t1","resource_id":"cc3"}]}`
	key := append(bearer(tokenA), "Idempotency-Key", `"bulk-race"`)
	type result struct {
		status   int
		replayed bool
		body     string
	}
	const racers = 4
	results := make([]result, racers)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, out := post(t, r, "/jobs/rebuild-cache/bulk", body, key...)
			results[i] = result{resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", out}
		}()
	}
	wg.Wait()
	created, first := 0, ""
	for _, res := range results {
		switch {
		case res.status == 200 && !res.replayed:
			var a bulkAnswer
			if err := json.Unmarshal([]byte(res.body), &a); err != nil || a.Created != 3 {
				t.Fatalf("the creating bulk: %s", res.body)
			}
			created++
			first = res.body
		case res.status == 200 || res.status == 409:
		default:
			t.Fatalf("a racer: %d %s", res.status, res.body)
		}
	}
	if created != 1 {
		t.Fatalf("%d bulks created (want 1): %+v", created, results)
	}
	for _, res := range results {
		if res.replayed && res.body != first {
			t.Fatalf("a replay differs from the first answer: %s vs %s", res.body, first)
		}
	}
	// Each resource has one job: the items of a later bulk without the key are duplicates of it.
	resp, out := post(t, r, "/jobs/rebuild-cache/bulk", body, bearer(tokenA)...)
	var a bulkAnswer
	if err := json.Unmarshal([]byte(out), &a); err != nil || resp.StatusCode != 200 || a.Created != 0 || a.Deduplicated != 3 {
		t.Fatalf("after the race: %d %s", resp.StatusCode, out)
	}
}

// A bulk that kept nothing because an item failed for a reason that may pass (503 dedup_pending:
// a duplicate of a job whose enqueue was never confirmed) is not stored for its Idempotency-Key:
// the retry with the key runs again and creates the job once the duplicate is gone.
func TestBulkIdempotencyKeyNotKeptAfterA5xx(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, nil)
	locks := locking.New(r.Redis(), locking.WithPrefix("jobguard"))
	tag := engine.ResourceTag("t1:bulk-home")
	dead := engine.NewJobID("t1:bulk-home", time.Now())
	markers := []string{locks.Key(tag, "dedup:rebuild"), locks.Key(tag, "dedup-pending:rebuild")}
	for _, k := range markers {
		r.Redis().Set(context.Background(), k, dead, time.Minute)
	}
	body := `{"items":[{"tenant_id":"t1","resource_id":"bulk-home"}]}`
	key := []string{"Idempotency-Key", `"bulk-5xx"`}
	resp, out := post(t, r, "/jobs/rebuild-cache/bulk", body, key...)
	var a bulkAnswer
	if err := json.Unmarshal([]byte(out), &a); err != nil || resp.StatusCode != 200 || a.Refused != 1 || a.Items[0].Status != 503 ||
		a.Items[0].Problem.Code != problem.CodeDedupPending || resp.Header.Get("Retry-After") != problem.UnavailableRetryAfter {
		t.Fatalf("bulk with a pending duplicate: %d %s (Retry-After %q)", resp.StatusCode, out, resp.Header.Get("Retry-After"))
	}
	idem := idempotency{rdb: r.Redis(), prefix: "jobguard"}
	if n := r.Redis().Exists(context.Background(), idem.recordKey("", "bulk-5xx")).Val(); n != 0 {
		t.Fatal("the Idempotency-Key was kept after a bulk that kept nothing and failed with a 503")
	}
	r.Redis().Del(context.Background(), markers...)
	resp, out = post(t, r, "/jobs/rebuild-cache/bulk", body, key...)
	a = bulkAnswer{}
	if err := json.Unmarshal([]byte(out), &a); err != nil || resp.StatusCode != 200 || a.Created != 1 || resp.Header.Get("Idempotent-Replayed") != "" ||
		resp.Header.Get("Retry-After") != "" {
		t.Fatalf("the retry with the key: %d %s", resp.StatusCode, out)
	}
}
