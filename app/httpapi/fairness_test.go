package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/jobguard/jobguard/app/problem"
)

// GET /fairness/{type} shows a fairly dispatched type's admission layer, a tenant its own key's
// counts only (not the totals over the other tenants' keys); a job waiting for its key says so in GET /jobs/{id}; POST /jobs/{id}/skip refuses a job
// that blocks nothing. No worker: the admitted job stays admitted.
func TestFairnessRoutes(t *testing.T) {
	t.Parallel()
	const operator = "operator-token-0123456789"
	r := startApp(t, RoleAPI, map[string]string{"API_TOKENS": twoTenants["API_TOKENS"], "OPERATOR_TOKENS": operator,
		"TASK_LIMITS": "rebuild-cache=fair:on,capacity:1"})
	var ids []string
	for _, res := range []string{"a", "b"} {
		resp, body := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"`+res+`"}`, bearer(tokenA)...)
		var ans jobAnswer
		if err := json.Unmarshal([]byte(body), &ans); err != nil || resp.StatusCode != 202 || ans.Status != "waiting" {
			t.Fatalf("enqueue of a fairly dispatched type: %d %s, want 202 status waiting", resp.StatusCode, body)
		}
		ids = append(ids, ans.JobID)
	}
	resp, body := get(t, r.base+"/jobs/"+ids[1], bearer(tokenA)...)
	var job struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(body), &job); err != nil || resp.StatusCode != 200 || job.Status != "waiting" {
		t.Fatalf("the second job of capacity 1: %d %s, want status waiting", resp.StatusCode, body)
	}
	// t2's job waits behind t1's admitted one (capacity 1).
	if resp, body := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t2","resource_id":"c"}`, bearer(tokenB)...); resp.StatusCode != 202 {
		t.Fatalf("enqueue for t2: %d %s", resp.StatusCode, body)
	}
	resp, body = get(t, r.base+"/fairness/rebuild-cache", bearer(tokenA)...)
	var f fairnessAnswer
	if err := json.Unmarshal([]byte(body), &f); err != nil || resp.StatusCode != 200 || f.Admitted != 1 || f.WaitingKeys != 1 ||
		len(f.Keys) != 1 || f.Keys[0] != (fairKeyAnswer{Key: "t1", Waiting: 1, Running: 1}) || f.Capacity != 0 {
		t.Fatalf("fairness for t1 (its key's counts, not the type's capacity): %d %s", resp.StatusCode, body)
	}
	resp, body = get(t, r.base+"/fairness/rebuild-cache", bearer(tokenB)...)
	f = fairnessAnswer{}
	if err := json.Unmarshal([]byte(body), &f); err != nil || resp.StatusCode != 200 || f.Admitted != 0 || f.WaitingKeys != 1 ||
		len(f.Keys) != 1 || f.Keys[0] != (fairKeyAnswer{Key: "t2", Waiting: 1}) {
		t.Fatalf("fairness for t2 (its key's counts, not the type's totals over t1's): %d %s", resp.StatusCode, body)
	}
	// The operator sees the type's totals and both tenants' keys; an unknown token is still 401.
	resp, body = get(t, r.base+"/fairness/rebuild-cache", bearer(operator)...)
	f = fairnessAnswer{}
	if err := json.Unmarshal([]byte(body), &f); err != nil || resp.StatusCode != 200 || f.Admitted != 1 || f.WaitingKeys != 2 || len(f.Keys) != 2 ||
		f.Capacity != 1 {
		t.Fatalf("fairness for an operator token (admitted 1 of capacity 1, t1 and t2 waiting): %d %s", resp.StatusCode, body)
	}
	if resp, body := get(t, r.base+"/fairness/rebuild-cache", bearer("not-a-token-of-anyone")...); resp.StatusCode != 401 {
		t.Fatalf("fairness for an unknown token: %d %s, want 401", resp.StatusCode, body)
	}
	if resp, body := get(t, r.base+"/fairness/reserve-stock", bearer(tokenA)...); resp.StatusCode != 404 {
		t.Fatalf("a type not dispatched fairly: %d %s, want 404", resp.StatusCode, body)
	}
	resp, body = post(t, r, "/jobs/"+ids[1]+"/skip", "", bearer(tokenA)...)
	if p := decodeProblem(t, resp, body); resp.StatusCode != 409 || p.Code != problem.CodeJobNotBlocking {
		t.Fatalf("skip of a waiting job: %d %s, want 409 %s", resp.StatusCode, body, problem.CodeJobNotBlocking)
	}
}

// An open API (no API_TOKENS) shows the type's totals over every key.
func TestFairnessTotalsForOperators(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, map[string]string{"TASK_LIMITS": "rebuild-cache=fair:on,capacity:1"})
	for _, job := range []string{`{"tenant_id":"t1","resource_id":"a"}`, `{"tenant_id":"t1","resource_id":"b"}`,
		`{"tenant_id":"t2","resource_id":"c"}`} {
		if resp, body := post(t, r, "/jobs/rebuild-cache", job); resp.StatusCode != 202 {
			t.Fatalf("enqueue: %d %s", resp.StatusCode, body)
		}
	}
	resp, body := get(t, r.base+"/fairness/rebuild-cache")
	var f fairnessAnswer
	if err := json.Unmarshal([]byte(body), &f); err != nil || resp.StatusCode != 200 || f.Admitted != 1 || f.WaitingKeys != 2 || len(f.Keys) != 2 {
		t.Fatalf("operator's fairness (admitted 1, t1 and t2 waiting): %d %s", resp.StatusCode, body)
	}
}

// A replay of a fairly dispatched type's failed job waits for its key's turn, and the retry route
// says so; the replay then runs and ends done.
func TestFairnessRetryAnswersWaiting(t *testing.T) {
	t.Parallel()
	var healthy atomic.Bool
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusNotFound) // permanent: the job fails at once
			return
		}
		fmt.Fprint(w, "fresh")
	}))
	defer upstream.Close()
	r := startApp(t, RoleAll, map[string]string{"REBUILD_SOURCE_URL": upstream.URL, "TASK_LIMITS": "rebuild-cache=fair:on,capacity:2"})
	resp, body := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"page"}`)
	var a jobAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil || resp.StatusCode != 202 || a.Status != "waiting" {
		t.Fatalf("enqueue: %d %s, want 202 waiting", resp.StatusCode, body)
	}
	waitJob(t, r, a.JobID, "failed")
	healthy.Store(true)
	resp, body = post(t, r, "/jobs/"+a.JobID+"/retry", "")
	var ans jobAnswer
	if err := json.Unmarshal([]byte(body), &ans); err != nil || resp.StatusCode != 202 || ans.Status != "waiting" {
		t.Fatalf("retry of a fair job: %d %s, want 202 waiting", resp.StatusCode, body)
	}
	waitJob(t, r, a.JobID, "done")
}

// An Idempotency-Key's replay of a fairly dispatched type's enqueue gives the first answer again,
// status waiting included (the stored answer said queued).
func TestFairnessReplayAnswersWaiting(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, map[string]string{"API_TOKENS": twoTenants["API_TOKENS"], "TASK_LIMITS": "rebuild-cache=fair:on,capacity:1"})
	h := append(bearer(tokenA), "Idempotency-Key", `"fair-replay"`)
	body := `{"tenant_id":"t1","resource_id":"replayed"}`
	resp, first := post(t, r, "/jobs/rebuild-cache", body, h...)
	var a jobAnswer
	if err := json.Unmarshal([]byte(first), &a); err != nil || resp.StatusCode != 202 || a.Status != "waiting" {
		t.Fatalf("enqueue: %d %s, want 202 waiting", resp.StatusCode, first)
	}
	resp, again := post(t, r, "/jobs/rebuild-cache", body, h...)
	if resp.StatusCode != 202 || again != first || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s (replayed %q), want 202 and the first body %s", resp.StatusCode, again,
			resp.Header.Get("Idempotent-Replayed"), first)
	}
}
