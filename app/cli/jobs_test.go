package cli_test

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// list, show, cancel and retry against a live API with tokens: a token lists its tenant's jobs,
// page by page; show prints the job; cancel cancels it (4 the second time); retry queues a failed
// job again (4 for one that is not failed); 3 for a job that is not there or is another tenant's;
// 2 for a wrong command line or a value the API refuses, and nothing on stdout then.
func TestJobsAgainstALiveAPI(t *testing.T) {
	t.Parallel()
	s := startAPI(t, twoTenants)
	ids := []string{s.enqueue(t, tokenA, "t1", "o-1"), s.enqueue(t, tokenA, "t1", "o-2"), s.enqueue(t, tokenB, "t2", "o-3")}
	asA := map[string]string{"JOBGUARD_URL": s.url, "JOBGUARD_TOKEN": tokenA, "USER": "ops"}

	code, out, errOut := run(t, asA, "list", "--output", "json")
	var p page
	if decode(t, out, &p); code != 0 || !slices.Equal(p.ids(), sorted(ids[0], ids[1])) || p.Jobs[0].Tenant != "t1" || p.NextCursor != "" {
		t.Fatalf("t1's list: exit %d %s %s", code, out, errOut)
	}
	first := p.Jobs[0].JobID // newest first; two jobs of one millisecond are in id order
	code, out, _ = run(t, asA, "list", "--limit", "1", "-o", "json")
	if decode(t, out, &p); code != 0 || len(p.Jobs) != 1 || p.Jobs[0].JobID != first || p.NextCursor == "" {
		t.Fatalf("first page: exit %d %s", code, out)
	}
	code, out, _ = run(t, asA, "list", "--limit", "1", "--cursor", p.NextCursor, "--output", "json")
	if decode(t, out, &p); code != 0 || len(p.Jobs) != 1 || p.Jobs[0].JobID == first {
		t.Fatalf("second page: exit %d %s", code, out)
	}
	code, out, _ = run(t, asA, "list", "--status", "done", "--type", "reserve-stock", "-o", "json")
	if decode(t, out, &p); code != 0 || len(p.Jobs) != 0 {
		t.Fatalf("done jobs: exit %d %s", code, out)
	}
	code, out, _ = run(t, asA, "list")
	if code != 0 || !strings.HasPrefix(out, "JOB ID") || strings.Count(out, "\n") != 3 || !strings.Contains(out, ids[1]+"  t1") || !strings.Contains(out, ids[0]+"  t1") {
		t.Fatalf("list as text: exit %d\n%s", code, out)
	}

	code, out, _ = run(t, asA, "show", ids[0], "--output", "json")
	var v view
	if decode(t, out, &v); code != 0 || v.JobID != ids[0] || v.Status != "queued" || v.Tenant != "t1" || len(v.Timeline) == 0 {
		t.Fatalf("show: exit %d %s", code, out)
	}
	for _, verb := range []string{"show", "get"} {
		code, out, _ = run(t, asA, verb, ids[0])
		if code != 0 || !strings.Contains(out, "status") || !strings.Contains(out, "queued") || !strings.Contains(out, "timeline:\n") {
			t.Fatalf("%s as text: exit %d\n%s", verb, code, out)
		}
	}

	code, out, errOut = run(t, asA, "cancel", ids[0], "--reason", "customer called", "--output", "json")
	var c struct{ Status, Was string }
	if decode(t, out, &c); code != 0 || c.Status != "cancelled" || c.Was != "queued" {
		t.Fatalf("cancel: exit %d %s %s", code, out, errOut)
	}
	_, out, _ = run(t, asA, "show", ids[0], "-o", "json")
	decode(t, out, &v)
	if last := v.Timeline[len(v.Timeline)-1]; v.Status != "cancelled" || last.Event != "cancelled" || v.LastError != "customer called" {
		t.Fatalf("after the cancel: %+v", v)
	}
	if code, out, errOut = run(t, asA, "cancel", ids[0]); code != 4 || out != "" || !strings.Contains(errOut, "has ended") {
		t.Fatalf("second cancel: exit %d %q %q", code, out, errOut)
	}
	if code, _, errOut = run(t, asA, "retry", ids[0]); code != 4 || !strings.Contains(errOut, "failed") {
		t.Fatalf("retry of a cancelled job: exit %d %q", code, errOut)
	}

	// A failed job (as its last attempt leaves it) is retried: queued again with a new delivery.
	s.Redis().HSet(context.Background(), s.recordKey(t, ids[1]), "status", "failed")
	code, out, errOut = run(t, asA, "retry", ids[1], "--output", "json")
	var a struct {
		JobID  string `json:"job_id"`
		Status string `json:"status"`
	}
	if decode(t, out, &a); code != 0 || a.Status != "queued" || a.JobID != ids[1] {
		t.Fatalf("retry: exit %d %s %s", code, out, errOut)
	}
	_, out, _ = run(t, asA, "show", ids[1], "-o", "json")
	if decode(t, out, &v); v.Status != "queued" || len(v.Deliveries) != 2 || !v.Deliveries[1].Current {
		t.Fatalf("after the retry: %s", out)
	}
	if code, out, _ = run(t, asA, "retry", ids[1]); code != 4 {
		t.Fatalf("retry of a queued job: exit %d %s", code, out)
	}

	for _, id := range []string{"nope", "0123456789abcdef-00000000000000000000000000ff", ids[2], "a/../../jobs"} {
		for _, verb := range []string{"show", "cancel", "retry"} {
			if code, out, errOut = run(t, asA, verb, id); code != 3 || out != "" || !strings.Contains(errOut, "Not Found") {
				t.Fatalf("%s %s: exit %d %q %q", verb, id, code, out, errOut)
			}
		}
	}
	for _, args := range [][]string{{}, {"frob"}, {"show"}, {"show", ids[2], "extra"}, {"list", "--limit", "0"},
		{"list", "--status", "lost"}, {"list", "--output", "yaml"}, {"list", "--cursor", "x!"}, {"list", "--bogus"},
		{"cancel", ids[2], "--reason", "two\nlines"}} {
		if code, out, errOut = run(t, asA, args...); code != 2 || out != "" || errOut == "" {
			t.Fatalf("%q: exit %d %q %q", args, code, out, errOut)
		}
	}
}

// With API_TOKENS a token is required: none is 401 and says how to give one, a wrong one is 401
// too, another tenant's list is 403; all exit 1 and none prints the token. --token and
// JOBGUARD_TOKEN are the same.
func TestJobsTokenRequiredAndWrongTokenAnswered(t *testing.T) {
	t.Parallel()
	s := startAPI(t, twoTenants)
	id := s.enqueue(t, tokenA, "t1", "o-1")
	at := map[string]string{"JOBGUARD_URL": s.url}
	code, out, errOut := run(t, at, "show", id)
	if code != 1 || out != "" || !strings.Contains(errOut, "Unauthorized") || !strings.Contains(errOut, "JOBGUARD_TOKEN") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("no token: exit %d %q %q", code, out, errOut)
	}
	const wrong = "token-x-not-a-real-one"
	for _, args := range [][]string{{"show", id, "--token", wrong}, {"cancel", id, "--token", wrong}} {
		if code, out, errOut = run(t, at, args...); code != 1 || out != "" || !strings.Contains(errOut, "Unauthorized") || strings.Contains(errOut, wrong) {
			t.Fatalf("%v: exit %d %q %q", args[:2], code, out, errOut)
		}
	}
	if code, _, errOut = run(t, map[string]string{"JOBGUARD_URL": s.url, "JOBGUARD_TOKEN": wrong}, "list"); code != 1 || strings.Contains(errOut, wrong) {
		t.Fatalf("wrong JOBGUARD_TOKEN: exit %d %q", code, errOut)
	}
	if code, _, errOut = run(t, at, "list", "--tenant", "t2", "--token", tokenA); code != 1 || !strings.Contains(errOut, "Forbidden") || strings.Contains(errOut, tokenA) {
		t.Fatalf("another tenant's list: exit %d %q", code, errOut)
	}
	if code, out, errOut = run(t, at, "show", id, "--token", tokenA, "-o", "json"); code != 0 || !strings.Contains(out, id) {
		t.Fatalf("--token: exit %d %q %q", code, out, errOut)
	}
	if code, out, errOut = run(t, nil, "--url", s.url, "--token="+tokenA, "-o", "json", "show", id); code != 0 || !strings.Contains(out, id) {
		t.Fatalf("the shared flags before the verb: exit %d %q %q", code, out, errOut)
	}
	if code, _, errOut = run(t, at, "list", "--token", "two words"); code != 2 || strings.Contains(errOut, "two words") {
		t.Fatalf("a token no header can carry: exit %d %q", code, errOut)
	}
	// A token longer than any header the server reads is named as such, not as "no answer" (the
	// server closes the connection while a 20 KB header is written: a broken pipe); one just
	// under the bound reaches the server and is refused there.
	huge := strings.Repeat("k", 20000)
	if code, _, errOut = run(t, map[string]string{"JOBGUARD_URL": s.url, "JOBGUARD_TOKEN": huge}, "list"); code != 2 ||
		!strings.Contains(errOut, "20000 bytes") || strings.Contains(errOut, "kkkk") || strings.Contains(errOut, "no answer") {
		t.Fatalf("a 20 KB token: exit %d %q", code, errOut)
	}
	if code, _, errOut = run(t, at, "list", "--token", strings.Repeat("k", 3000)); code != 1 || !strings.Contains(errOut, "Unauthorized") {
		t.Fatalf("a 3,000-byte token: exit %d %q", code, errOut)
	}
}

// On an open API (the quickstart's) the CLI needs no setup but the server's HTTP_ADDR: list shows
// every tenant's jobs, --tenant one tenant's.
func TestJobsOnAnOpenAPIListsEveryTenant(t *testing.T) {
	t.Parallel()
	s := startAPI(t, nil)
	ids := []string{s.enqueue(t, "", "t1", "o-1"), s.enqueue(t, "", "t2", "o-2")}
	local := map[string]string{"HTTP_ADDR": strings.TrimPrefix(s.url, "http://")} // the server's own variable, as on its host
	code, out, errOut := run(t, local, "list", "-o", "json")
	var p page
	if decode(t, out, &p); code != 0 || !slices.Equal(p.ids(), sorted(ids...)) || p.tenantOf(ids[0]) != "t1" || p.tenantOf(ids[1]) != "t2" {
		t.Fatalf("every tenant's: exit %d %s %s", code, out, errOut)
	}
	code, out, _ = run(t, local, "list", "--tenant", "t1", "-o", "json")
	if decode(t, out, &p); code != 0 || len(p.Jobs) != 1 || p.Jobs[0].JobID != ids[0] {
		t.Fatalf("t1's: exit %d %s", code, out)
	}
	if code, out, _ = run(t, local, "list"); code != 0 || !strings.Contains(out, ids[0]+"  t1") || !strings.Contains(out, ids[1]+"  t2") {
		t.Fatalf("as text: exit %d\n%s", code, out)
	}
}

// list's search flags are GET /jobs's search: tags (any or all), error text, a creation window; a
// value the API refuses is exit 2.
func TestJobsListSearch(t *testing.T) {
	t.Parallel()
	s := startAPI(t, nil)
	eu := s.enqueueBody(t, "", `{"tenant_id":"t1","order_id":"o-1","sku":"s-1","quantity":1,"tags":["eu","vip"]}`)
	s.enqueueBody(t, "", `{"tenant_id":"t1","order_id":"o-2","sku":"s-1","quantity":1,"tags":["us"]}`)
	at := map[string]string{"JOBGUARD_URL": s.url}
	for args, want := range map[string][]string{
		"--tag eu":                              {eu},
		"--tag eu --tag vip --tags-match all":   {eu},
		"--tag eu --tag us --tags-match all":    nil,
		"--error nothing-failed":                nil,
		"--created-before 2000-01-01T00:00:00Z": nil,
	} {
		code, out, errOut := run(t, at, append([]string{"list", "-o", "json"}, strings.Fields(args)...)...)
		var p page
		if decode(t, out, &p); code != 0 || !slices.Equal(p.ids(), want) {
			t.Errorf("list %s: exit %d %s %s, want %v", args, code, out, errOut, want)
		}
	}
	for _, args := range []string{"--tags-match some", "--created-after yesterday", "--tag no/slash"} {
		if code, out, errOut := run(t, at, append([]string{"list"}, strings.Fields(args)...)...); code != 2 || out != "" || !strings.Contains(errOut, "Bad Request") {
			t.Errorf("list %s: exit %d %q %q, want 2", args, code, out, errOut)
		}
	}
}

// With API_TOKENS a token of OPERATOR_TOKENS is no key to /jobs: list and show answer 401 (exit 1),
// as docs/OPERATIONS.md ("Across tenants") says; the CLI sees one tenant at a time.
func TestJobsOperatorTokenSeesNoTenantsJobs(t *testing.T) {
	t.Parallel()
	const operator = "operator-0123456789"
	s := startAPI(t, map[string]string{"API_TOKENS": twoTenants["API_TOKENS"], "OPERATOR_TOKENS": operator})
	id := s.enqueue(t, tokenA, "t1", "o-1")
	asOperator := map[string]string{"JOBGUARD_URL": s.url, "JOBGUARD_TOKEN": operator}
	for _, args := range [][]string{{"list"}, {"list", "--tenant", "t1"}, {"show", id}} {
		if code, out, errOut := run(t, asOperator, args...); code != 1 || out != "" || !strings.Contains(errOut, "Unauthorized") {
			t.Fatalf("%q with an operator token: exit %d %q %q", args, code, out, errOut)
		}
	}
}
