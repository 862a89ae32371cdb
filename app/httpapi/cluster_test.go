package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

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
	// A workflow's answer is stored for its Idempotency-Key after the confirmation's answer (the
	// key's slot is on another master).
	wf := workflowBody(rebuildNode("a", "c-wf-a"), rebuildNode("b", "c-wf-b", "a"))
	resp, created := post(t, r, "/workflows", wf, "Idempotency-Key", `"c-wf"`)
	if resp.StatusCode != 202 {
		t.Fatalf("workflow on the cluster: %d %s", resp.StatusCode, created)
	}
	if resp, again := post(t, r, "/workflows", wf, "Idempotency-Key", `"c-wf"`); again != created || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("workflow replay on the cluster: %s, want %s", again, created)
	}
	// The key again for another order: its create ran in the first pipeline (on the order's
	// node; the claim on the key's), and the refusal took the job back there.
	jobKeys := func() []string {
		var keys []string
		var mu sync.Mutex
		err := cl.Client.ForEachMaster(t.Context(), func(ctx context.Context, node *redis.Client) error {
			found, err := node.Keys(ctx, cl.Prefix+":*").Result()
			mu.Lock()
			defer mu.Unlock()
			for _, k := range found {
				if strings.Contains(k, ":job:") || strings.Contains(k, ":dedup") || strings.Contains(k, "{idem:") {
					keys = append(keys, k)
				}
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(keys)
		return keys
	}
	before := jobKeys()
	resp, body = post(t, r, "/jobs/reserve-stock", `{"tenant_id":"t1","order_id":"o-2","sku":"sku-2","quantity":3}`, "Idempotency-Key", `"c-1"`)
	if p := decodeProblem(t, resp, body); p.Status != 422 {
		t.Fatalf("the key for another order on the cluster: %+v", p)
	}
	if after := jobKeys(); !slices.Equal(after, before) {
		t.Fatalf("the refused request left keys on the cluster: before %v, after %v", before, after)
	}
}

// With QUEUE_SHARDS=3 on a 3-master cluster the app's queues are sharded: orders of different SKUs
// go through a worker on several shards of their queue (each job's view names its shard), and every
// one ends done.
func TestOnRedisClusterWithQueueShards(t *testing.T) {
	// Not parallel: the apps of TestOnRedisCluster and this test would serve the same asynq queues
	// of the shared cluster (asynq's keys carry no prefix), each taking the other's deliveries.
	cl := redistest.NewCluster(t)
	r := startApp(t, RoleAll, map[string]string{"REDIS_URL": cl.Cluster.URL(), "REDIS_MODE": "cluster", "KEY_PREFIX": cl.Prefix,
		"QUEUE_SHARDS": "3"})
	var ids []string
	for i := range 12 {
		order := fmt.Sprintf(`{"tenant_id":"t1","order_id":"o-%d","sku":"sku-%d","quantity":1}`, i, i)
		resp, body := post(t, r, "/jobs/reserve-stock", order, "Idempotency-Key", fmt.Sprintf(`"s-%d"`, i))
		var a jobAnswer
		_ = json.Unmarshal([]byte(body), &a)
		if resp.StatusCode != 202 {
			t.Fatal(resp.StatusCode, body)
		}
		ids = append(ids, a.JobID)
	}
	shards := map[string]bool{}
	for _, id := range ids {
		shards[waitJob(t, r, id, "done").Queue] = true
	}
	if len(shards) < 2 {
		t.Fatalf("12 orders of 12 SKUs ran on the queues %v, want several shards", shards)
	}
}
