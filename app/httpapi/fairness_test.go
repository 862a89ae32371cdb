package httpapi

import (
	"encoding/json"
	"testing"

	"github.com/jobguard/jobguard/app/problem"
)

// GET /fairness/{type} shows a fairly dispatched type's admission layer, a tenant its own key
// only; a job waiting for its key says so in GET /jobs/{id}; POST /jobs/{id}/skip refuses a job
// that blocks nothing. No worker: the admitted job stays admitted.
func TestFairnessRoutes(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, map[string]string{"API_TOKENS": twoTenants["API_TOKENS"],
		"TASK_LIMITS": "rebuild-cache=fair:on,capacity:1"})
	var ids []string
	for _, res := range []string{"a", "b"} {
		resp, body := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"`+res+`"}`, bearer(tokenA)...)
		var ans jobAnswer
		if err := json.Unmarshal([]byte(body), &ans); err != nil || resp.StatusCode != 202 {
			t.Fatalf("enqueue: %d %s", resp.StatusCode, body)
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
	resp, body = get(t, r.base+"/fairness/rebuild-cache", bearer(tokenA)...)
	var f fairnessAnswer
	if err := json.Unmarshal([]byte(body), &f); err != nil || resp.StatusCode != 200 || f.Admitted != 1 || f.WaitingKeys != 1 ||
		len(f.Keys) != 1 || f.Keys[0] != (fairKeyAnswer{Key: "t1", Waiting: 1, Running: 1}) {
		t.Fatalf("fairness for t1: %d %s", resp.StatusCode, body)
	}
	resp, body = get(t, r.base+"/fairness/rebuild-cache", bearer(tokenB)...)
	if err := json.Unmarshal([]byte(body), &f); err != nil || resp.StatusCode != 200 || f.Admitted != 1 || len(f.Keys) != 0 {
		t.Fatalf("fairness for t2 (another tenant's key hidden): %d %s", resp.StatusCode, body)
	}
	if resp, body := get(t, r.base+"/fairness/reserve-stock", bearer(tokenA)...); resp.StatusCode != 404 {
		t.Fatalf("a type not dispatched fairly: %d %s, want 404", resp.StatusCode, body)
	}
	resp, body = post(t, r, "/jobs/"+ids[1]+"/skip", "", bearer(tokenA)...)
	if p := decodeProblem(t, resp, body); resp.StatusCode != 409 || p.Code != problem.CodeJobNotBlocking {
		t.Fatalf("skip of a waiting job: %d %s, want 409 %s", resp.StatusCode, body, problem.CodeJobNotBlocking)
	}
}
