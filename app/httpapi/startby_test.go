package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// rawDo sends a request without the OpenAPI check of testClient: openapi.json does not describe
// start_by and the expired status yet (its owner adds them; README lists both).
func rawDo(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// start_by in an enqueue body: an RFC 3339 time in the future, else 400 naming it; the other
// members are still the task's, decoded strictly. A job not started by it expires: GET /jobs/{id}
// says expired with the event on its timeline, the list's status filter finds it, and the metric
// (present at zero for every reason from the start) counts it.
func TestStartByInTheEnqueueBody(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, nil) // no worker: the job waits, the sweep is called by hand
	for _, body := range []string{
		`{"tenant_id":"t1","resource_id":"w","start_by":"2020-01-01T00:00:00Z"}`,
		`{"tenant_id":"t1","resource_id":"w","start_by":"in an hour"}`,
		`{"tenant_id":"t1","resource_id":"w","start_by":1}`,
	} {
		code, ans := rawDo(t, http.MethodPost, r.base+"/jobs/rebuild-cache", body)
		var p problem.Details
		if code != 400 || json.Unmarshal([]byte(ans), &p) != nil || p.Field != "start_by" {
			t.Fatalf("%s: %d %s, want 400 naming start_by", body, code, ans)
		}
	}
	code, ans := rawDo(t, http.MethodPost, r.base+"/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"w","start_by":"2099-01-01T00:00:00Z","extra":1}`)
	if code != 400 || !strings.Contains(ans, `"extra"`) {
		t.Fatalf("an unknown member beside start_by: %d %s", code, ans)
	}
	if m := scrape(t, r); !strings.Contains(string(m), `jobguard_jobs_expired_total{reason="retention",type="rebuild-cache"} 0`) {
		t.Fatal("jobs_expired_total is not there at zero")
	}

	startBy := time.Now().Add(1500 * time.Millisecond).UTC().Truncate(time.Millisecond)
	code, ans = rawDo(t, http.MethodPost, r.base+"/jobs/rebuild-cache",
		`{"tenant_id":"t1","resource_id":"w","start_by":"`+startBy.Format(time.RFC3339Nano)+`"}`)
	var a jobAnswer
	if code != 202 || json.Unmarshal([]byte(ans), &a) != nil {
		t.Fatalf("enqueue with start_by: %d %s", code, ans)
	}
	var v jobView
	code, ans = rawDo(t, http.MethodGet, r.base+"/jobs/"+a.JobID, "")
	if code != 200 || json.Unmarshal([]byte(ans), &v) != nil || v.StartBy == nil || !v.StartBy.Equal(startBy) || v.Status != "queued" {
		t.Fatalf("view: %d %s, want queued with start_by %s", code, ans, startBy)
	}
	testsupport.Eventually(t, 10*time.Second, "the sweep expires the job", func() bool {
		n, err := r.API().deps.Stack.ExpireDue(context.Background())
		return err == nil && n == 1
	})
	code, ans = rawDo(t, http.MethodGet, r.base+"/jobs/"+a.JobID, "")
	if code != 200 || json.Unmarshal([]byte(ans), &v) != nil || v.Status != "expired" || v.Timeline[len(v.Timeline)-1].Event != "expired" {
		t.Fatalf("view after the deadline: %d %s", code, ans)
	}
	code, ans = rawDo(t, http.MethodGet, r.base+"/jobs?tenant=t1&status=expired", "")
	if code != 200 || !strings.Contains(ans, a.JobID) {
		t.Fatalf("list of expired jobs: %d %s", code, ans)
	}
	if n := scrape(t, r).value(t, "jobguard_jobs_expired_total", map[string]string{"reason": "start_by", "type": "rebuild-cache"}); n != 1 {
		t.Fatalf("jobs_expired_total{reason=start_by} = %v, want 1", n)
	}
}
