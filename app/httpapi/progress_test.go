package httpapi

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// The job view shows the progress the handler last reported (written here as Job.Progress's script
// writes it: the engine's tests cover the script).
func TestJobViewShowsProgress(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, nil)
	resp, body := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"p"}`)
	var a jobAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil || resp.StatusCode != 202 {
		t.Fatalf("enqueue: %d %s", resp.StatusCode, body)
	}
	v := waitJob(t, r, a.JobID, "queued")
	if v.Progress != 0 || v.ProgressNote != "" {
		t.Fatalf("progress before any report: %+v", v.progressView)
	}
	keys, err := r.API().deps.Stack.Store().Keys(a.JobID, "")
	if err != nil {
		t.Fatal(err)
	}
	r.Redis().HSet(context.Background(), keys.Record, jobstore.FieldProgress, 42, jobstore.FieldProgressNote, "page 3 of 7")
	var got map[string]any
	getJSON(t, r, "/jobs/"+a.JobID, &got)
	if got["progress"] != float64(42) || got["progress_note"] != "page 3 of 7" {
		t.Fatalf("view: progress %v, note %v", got["progress"], got["progress_note"])
	}
}
