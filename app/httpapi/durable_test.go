package httpapi

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/redistest"
)

// DURABLE_REPLICAS=1 against a real master and replica: with the replica up a 202 means the
// replica holds the job; with it paused (SIGSTOP) the enqueue answers 503 not_durable with
// Retry-After (the WAIT's verdict: a request deadline would be another code), and its Idempotency-Key answer is not kept for a replay.
func TestDurableEnqueueAnswers503WithoutItsReplica(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	if err := redistest.WaitReplica(replica.Addr, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	r := startApp(t, RoleAPI, map[string]string{"REDIS_URL": "redis://" + master.Addr + "/0",
		"DURABLE_REPLICAS": "1", "DURABLE_TIMEOUT": "2s", "REQUEST_TIMEOUT": "30s"}) // 2s, the most: 300ms failed once at load 15-22
	resp, body := post(t, r, "/jobs/reserve-stock", `{"tenant_id":"t1","order_id":"o1","sku":"s1","quantity":1}`)
	var a jobAnswer
	_ = json.Unmarshal([]byte(body), &a)
	if resp.StatusCode != 202 {
		t.Fatal(resp.StatusCode, body)
	}
	if n := replica.Client(t, 0).Exists(t.Context(), recordKey(t, a.JobID)).Val(); n != 1 {
		t.Fatal("the replica does not hold the job the 202 acknowledged")
	}

	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = replica.Resume() }()
	order := `{"tenant_id":"t1","order_id":"o2","sku":"s1","quantity":1}`
	key := []string{"Idempotency-Key", `"k-o2"`}
	resp, body = post(t, r, "/jobs/reserve-stock", order, key...)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || codeIn(body) != problem.CodeNotDurable {
		t.Fatalf("with the replica paused: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	// The same order again, without the key: the job of the 503 stands on the master, and a
	// duplicate's answer must not acknowledge it before the replica holds it (it did: 202).
	resp, body = post(t, r, "/jobs/reserve-stock", order)
	if resp.StatusCode != 503 || codeIn(body) != problem.CodeNotDurable {
		t.Fatalf("a duplicate of the job the replica does not hold: %d %s", resp.StatusCode, body)
	}
	if err := replica.Resume(); err != nil {
		t.Fatal(err)
	}
	resp, body = post(t, r, "/jobs/reserve-stock", order, key...)
	if resp.StatusCode >= 300 || resp.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("the retry with the same key: %d %v %s", resp.StatusCode, resp.Header, body)
	}
}

// recordKey is the job record's key under the default prefix.
func recordKey(t *testing.T, id string) string {
	tag, err := engine.TagOf(id)
	if err != nil {
		t.Fatal(err)
	}
	return "jobguard:{" + tag + "}:job:" + id
}

func codeIn(body string) string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal([]byte(body), &p)
	return p.Code
}
