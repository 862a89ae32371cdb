package httpapi

import (
	"encoding/json"
	"testing"
	"time"
)

// GET /jobs/{id}?wait=: answers when the status changes (here: a cancel during the wait), or with
// the unchanged view when the wait is over, even past REQUEST_TIMEOUT; bad waits are 400 and
// another tenant's job 404 at once.
func TestLongPollJobView(t *testing.T) {
	t.Parallel()
	env := map[string]string{"API_TOKENS": twoTenants["API_TOKENS"], "REQUEST_TIMEOUT": "2s"}
	r := startApp(t, RoleAPI, env) // no worker: the job stays queued
	resp, body := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"w"}`, bearer(tokenA)...)
	var a jobAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil || resp.StatusCode != 202 {
		t.Fatalf("enqueue: %d %s", resp.StatusCode, body)
	}
	path := "/jobs/" + a.JobID
	t0 := time.Now()
	var v jobView
	if code := getJSON(t, r, path+"?wait=2500ms", &v, bearer(tokenA)...); code != 200 || v.Status != "queued" {
		t.Fatalf("unchanged wait: %d %+v", code, v)
	}
	if d := time.Since(t0); d < 2*time.Second {
		t.Fatalf("a wait with no change answered after %s, want the whole wait", d)
	}
	changed := make(chan time.Time, 1)
	go func() {
		var w jobView
		getJSON(t, r, path+"?wait=10s&status=queued", &w, bearer(tokenA)...)
		if w.Status == "cancelled" {
			changed <- time.Now()
		}
		close(changed)
	}()
	time.Sleep(300 * time.Millisecond) // let the long-poll start waiting: what is tested is its answer, not this pause
	cancelled := time.Now()
	if resp, body := post(t, r, path+"/cancel", "", bearer(tokenA)...); resp.StatusCode != 200 {
		t.Fatalf("cancel: %d %s", resp.StatusCode, body)
	}
	select {
	case at, ok := <-changed:
		if !ok {
			t.Fatal("the long-poll did not answer the cancelled view")
		}
		if d := at.Sub(cancelled); d > 5*time.Second {
			t.Fatalf("the long-poll answered %s after the change", d)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the long-poll did not answer the change")
	}
	t0 = time.Now()
	if code := getJSON(t, r, path+"?wait=10s", &v, bearer(tokenA)...); code != 200 || v.Status != "cancelled" || time.Since(t0) > 5*time.Second {
		t.Fatalf("wait on an ended job: %d %s after %s", code, v.Status, time.Since(t0))
	}
	for q, want := range map[string]int{"?wait=31s": 400, "?wait=soon": 400, "?wait=0s": 400, "?wait=1s&status=asleep": 400} {
		if code := getJSON(t, r, path+q, nil, bearer(tokenA)...); code != want {
			t.Errorf("%s: %d, want %d", q, code, want)
		}
	}
	t0 = time.Now()
	if code := getJSON(t, r, path+"?wait=10s&status=cancelled", nil, bearer(tokenB)...); code != 404 || time.Since(t0) > 5*time.Second {
		t.Fatalf("another tenant: %d after %s", code, time.Since(t0))
	}
}
