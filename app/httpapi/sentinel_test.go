package httpapi

import (
	"encoding/json"
	"testing"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/redistest"
)

// The app through Redis Sentinel: it asks the sentinel for the master and runs a job there.
func TestThroughSentinel(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, master)
	r := startApp(t, RoleAll, map[string]string{"REDIS_URL": sentinel.URL(), "REDIS_MODE": "sentinel"})
	resp, body := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"home"}`)
	var a jobAnswer
	_ = json.Unmarshal([]byte(body), &a)
	if resp.StatusCode != 202 {
		t.Fatal(resp.StatusCode, body)
	}
	waitJob(t, r, a.JobID, "done")
	if n := master.Client(t, 0).Exists(t.Context(), "jobguard:{"+engine.ResourceTag("t1:home")+"}:cache").Val(); n != 1 {
		t.Fatal("the cache entry is not on the sentinel's master")
	}
}
