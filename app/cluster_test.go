package app

import (
	"encoding/json"
	"testing"

	"github.com/jobguard/jobguard/internal/redistest"
)

// The whole app on a 3-master Redis Cluster: every script's keys share a slot, asynq's keys carry
// its queue tags, and a job goes from the API through a worker to its read model.
func TestOnRedisCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.NewCluster(t)
	r := startApp(t, RoleAll, map[string]string{"REDIS_URL": cl.Cluster.URL(), "REDIS_MODE": "cluster", "KEY_PREFIX": cl.Prefix})
	order := `{"tenant_id":"t1","order_id":"o-1","sku":"sku-1","quantity":3}`
	resp, body := post(t, r, "/jobs/reserve-stock", order, "Idempotency-Key", `"c-1"`)
	var a jobAnswer
	_ = json.Unmarshal([]byte(body), &a)
	if resp.StatusCode != 202 {
		t.Fatal(resp.StatusCode, body)
	}
	if resp, again := post(t, r, "/jobs/reserve-stock", order, "Idempotency-Key", `"c-1"`); again != body || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay on the cluster: %s", again)
	}
	v := waitJob(t, r, a.JobID, "done")
	if v.Fencing != 1 || v.Lease.CurrentFence != 1 {
		t.Fatalf("job %+v", v)
	}
	var s struct {
		Reserved int64 `json:"reserved"`
	}
	if code := getJSON(t, r, "/stock/t1/sku-1", &s); code != 200 || s.Reserved != 3 {
		t.Fatalf("stock %d %+v", code, s)
	}
	if resp, _ := get(t, r.base+"/monitoring/api/queues"); resp.StatusCode != 200 {
		t.Fatalf("UI on the cluster: %d", resp.StatusCode)
	}
}
