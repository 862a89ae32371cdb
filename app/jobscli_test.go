package app

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/tasks/registry"
)

// jobsRun runs jobguard jobs with args against redisURL and returns its exit code and output.
func jobsRun(t *testing.T, redisURL string, args ...string) (int, string, string) {
	t.Helper()
	env := map[string]string{"USER": "ops"}
	if redisURL != "" {
		env["REDIS_URL"] = redisURL
	}
	var out, errOut bytes.Buffer
	code := Main(context.Background(), append([]string{"jobs"}, args...), lookupFrom(env), &out, &errOut, registry.All())
	return code, out.String(), errOut.String()
}

type cliPage struct {
	Jobs []struct {
		JobID  string `json:"job_id"`
		Tenant string `json:"tenant"`
		Type   string `json:"type"`
		Status string `json:"status"`
	} `json:"jobs"`
	NextCursor string `json:"next_cursor"`
}

func decodeCLI(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, s)
	}
}

// jobguard jobs on a deployment's Redis: list across tenants or for one, page by page and
// filtered; get; cancel (then 4 for a second cancel); retry of a failed job (4 for one that is not);
// 3 for a job that is not there, 2 for a wrong command line; text output for people.
func TestJobsCommand(t *testing.T) {
	t.Parallel()
	url := redistest.NewDB(t).URL()
	r := startApp(t, RoleAPI, map[string]string{"REDIS_URL": url, "API_TOKENS": twoTenants["API_TOKENS"]}) // no worker: jobs stay queued
	var ids []string
	for i, tok := range []string{tokenA, tokenA, tokenB} {
		tenant := map[string]string{tokenA: "t1", tokenB: "t2"}[tok]
		order := `{"tenant_id":"` + tenant + `","order_id":"o-` + string(rune('1'+i)) + `","sku":"s-1","quantity":1}`
		resp, body := post(t, r, "/jobs/reserve-stock", order, bearer(tok)...)
		var a jobAnswer
		if err := json.Unmarshal([]byte(body), &a); err != nil || resp.StatusCode != 202 {
			t.Fatalf("enqueue: %d %s", resp.StatusCode, body)
		}
		ids = append(ids, a.JobID)
	}

	code, out, errOut := jobsRun(t, url, "list", "--output", "json")
	var all cliPage
	decodeCLI(t, out, &all)
	if code != 0 || len(all.Jobs) != 3 || all.Jobs[0].JobID != ids[2] || all.Jobs[0].Tenant != "t2" || all.Jobs[2].JobID != ids[0] || all.NextCursor != "" {
		t.Fatalf("list across tenants: exit %d %s %s", code, out, errOut)
	}
	code, out, _ = jobsRun(t, url, "list", "--tenant", "t1", "--limit", "1", "-o", "json")
	var page cliPage
	decodeCLI(t, out, &page)
	if code != 0 || len(page.Jobs) != 1 || page.Jobs[0].JobID != ids[1] || page.NextCursor == "" {
		t.Fatalf("t1's first page: exit %d %s", code, out)
	}
	code, out, _ = jobsRun(t, url, "list", "--tenant", "t1", "--limit", "1", "--cursor", page.NextCursor, "--output", "json")
	decodeCLI(t, out, &page)
	if code != 0 || len(page.Jobs) != 1 || page.Jobs[0].JobID != ids[0] {
		t.Fatalf("t1's second page: exit %d %s", code, out)
	}
	code, out, _ = jobsRun(t, url, "list", "--status", "done", "--type", "reserve-stock", "--output", "json")
	if decodeCLI(t, out, &page); code != 0 || len(page.Jobs) != 0 {
		t.Fatalf("done jobs: exit %d %s", code, out)
	}
	code, out, _ = jobsRun(t, url, "list")
	if code != 0 || !strings.HasPrefix(out, "JOB ID") || strings.Count(out, "\n") != 4 || !strings.Contains(out, ids[2]+"  t2") {
		t.Fatalf("list as text: exit %d\n%s", code, out)
	}

	code, out, _ = jobsRun(t, url, "get", ids[0], "--output", "json")
	var v jobView
	if decodeCLI(t, out, &v); code != 0 || v.JobID != ids[0] || v.Status != "queued" || v.Tenant != "t1" || len(v.Timeline) == 0 {
		t.Fatalf("get: exit %d %s", code, out)
	}
	code, out, _ = jobsRun(t, url, "get", ids[0])
	if code != 0 || !strings.Contains(out, "status") || !strings.Contains(out, "queued") || !strings.Contains(out, "timeline:\n") {
		t.Fatalf("get as text: exit %d\n%s", code, out)
	}

	code, out, errOut = jobsRun(t, url, "cancel", ids[0], "--reason", "customer called", "--output", "json")
	var c cancelAnswer
	if decodeCLI(t, out, &c); code != 0 || c.Status != "cancelled" || c.Was != "queued" || !c.DeliveryDeleted {
		t.Fatalf("cancel: exit %d %s %s", code, out, errOut)
	}
	_, out, _ = jobsRun(t, url, "get", ids[0], "-o", "json")
	decodeCLI(t, out, &v)
	if last := v.Timeline[len(v.Timeline)-1]; v.Status != "cancelled" || last.Event != "cancelled" || !strings.Contains(last.Detail, "operator ops") || v.LastError != "customer called" {
		t.Fatalf("after the cancel: %+v", v)
	}
	if code, out, errOut = jobsRun(t, url, "cancel", ids[0]); code != 4 || out != "" || !strings.Contains(errOut, "has ended") {
		t.Fatalf("second cancel: exit %d %q %q", code, out, errOut)
	}
	if code, _, errOut = jobsRun(t, url, "retry", ids[0]); code != 4 || !strings.Contains(errOut, "not failed") {
		t.Fatalf("retry of a cancelled job: exit %d %q", code, errOut)
	}

	// A failed job (as its last attempt leaves it) is retried: queued again with a new delivery.
	k, _ := r.stack.Store().Keys(ids[1], "")
	r.Redis().HSet(context.Background(), k.Record, "status", "failed")
	code, out, errOut = jobsRun(t, url, "retry", ids[1], "--output", "json")
	var a jobAnswer
	if decodeCLI(t, out, &a); code != 0 || a.Status != "queued" || a.JobID != ids[1] {
		t.Fatalf("retry: exit %d %s %s", code, out, errOut)
	}
	_, out, _ = jobsRun(t, url, "get", ids[1], "-o", "json")
	if decodeCLI(t, out, &v); v.Status != "queued" || len(v.Deliveries) != 2 || !v.Deliveries[1].Current {
		t.Fatalf("after the retry: %s", out)
	}

	for _, id := range []string{"nope", "0123456789abcdef-00000000000000000000000000ff"} {
		for _, verb := range []string{"get", "cancel", "retry"} {
			if code, out, errOut = jobsRun(t, url, verb, id); code != 3 || out != "" || !strings.Contains(errOut, "not found") {
				t.Fatalf("%s %s: exit %d %q %q", verb, id, code, out, errOut)
			}
		}
	}
	for _, args := range [][]string{{}, {"frob"}, {"get"}, {"get", ids[2], "extra"}, {"list", "--limit", "0"},
		{"list", "--status", "lost"}, {"list", "--output", "yaml"}, {"list", "--cursor", "x!"}, {"list", "--bogus"},
		{"cancel", ids[2], "--reason", "two\nlines"}} {
		if code, out, errOut = jobsRun(t, url, args...); code != 2 || out != "" || errOut == "" {
			t.Fatalf("%q: exit %d %q %q", args, code, out, errOut)
		}
	}
	if code, _, errOut = jobsRun(t, "", "list"); code != 2 || !strings.Contains(errOut, "REDIS_URL is not set") {
		t.Fatalf("without REDIS_URL: exit %d %q", code, errOut)
	}
	if code, _, _ = jobsRun(t, url, "--help"); code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
}
