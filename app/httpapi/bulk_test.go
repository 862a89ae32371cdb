package httpapi

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jobguard/jobguard/app/problem"
)

// POST /jobs/{type}/bulk answers each item as the single route would: new (202), a duplicate of an
// earlier item or of a live job (200, that job's id), refused (the problem naming the field, 403
// for another tenant's body). Atomic: with a refused item nothing is created, the others 424.
func TestBulkEnqueue(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, twoTenants)
	resp, out := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"live"}`, bearer(tokenA)...)
	var live jobAnswer
	if err := json.Unmarshal([]byte(out), &live); err != nil || resp.StatusCode != 202 {
		t.Fatalf("single: %d %s", resp.StatusCode, out)
	}
	items := []string{
		`{"tenant_id":"t1","resource_id":"r1"}`,
		`{"tenant_id":"t1","resource_id":"r2"}`,
		`{"tenant_id":"t1","resource_id":"r1"}`,
		`{"tenant_id":"t1","resource_id":"live"}`,
		`{"tenant_id":"t1"}`,
		`{"tenant_id":"t2","resource_id":"r3"}`,
	}
	body := `{"items":[` + strings.Join(items, ",") + `]}`
	before := jobKeys(r)
	resp, out = post(t, r, "/jobs/rebuild-cache/bulk?atomic=true", body, bearer(tokenA)...)
	var a bulkAnswer
	if err := json.Unmarshal([]byte(out), &a); err != nil || resp.StatusCode != 200 || !a.Atomic || a.Created != 0 || a.Refused != 6 {
		t.Fatalf("atomic: %d %s", resp.StatusCode, out)
	}
	if a.Items[0].Status != 424 || a.Items[0].Problem.Code != problem.CodeBulkAborted || a.Items[4].Status != 400 ||
		a.Items[4].Problem.Field != "resource_id" || a.Items[5].Status != 403 {
		t.Fatalf("atomic items: %s", out)
	}
	if n := jobKeys(r); n != before {
		t.Fatalf("an atomic bulk with a refused item kept %d keys", n-before)
	}
	resp, out = post(t, r, "/jobs/rebuild-cache/bulk", body, bearer(tokenA)...)
	a = bulkAnswer{}
	if err := json.Unmarshal([]byte(out), &a); err != nil || resp.StatusCode != 200 || a.Created != 2 || a.Deduplicated != 2 || a.Refused != 2 {
		t.Fatalf("bulk: %d %s", resp.StatusCode, out)
	}
	it := a.Items
	if it[0].Status != 202 || it[1].Status != 202 || it[0].JobID == it[1].JobID ||
		it[2].Status != 200 || !it[2].Deduplicated || it[2].JobID != it[0].JobID ||
		it[3].Status != 200 || it[3].JobID != live.JobID ||
		it[4].Status != 400 || it[4].Problem.Field != "resource_id" || it[5].Status != 403 || it[5].Problem.Field != "tenant_id" {
		t.Fatalf("items: %s", out)
	}
	var v jobView
	if code := getJSON(t, r, "/jobs/"+it[1].JobID, &v, bearer(tokenA)...); code != 200 || v.Status != "queued" {
		t.Fatalf("a bulk's job: %d %+v", code, v)
	}
	resp, out = post(t, r, "/jobs/rebuild-cache/bulk", `{"items":[]}`, bearer(tokenA)...)
	if p := decodeProblem(t, resp, out); p.Status != 400 || p.Field != "items" {
		t.Fatalf("empty bulk: %+v", p)
	}
}

// A query's atomic is true or false: any other value is a 400 naming it, and nothing is created
// (it was run non-atomically before).
func TestBulkAtomicQueryIsTrueOrFalse(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, twoTenants)
	body := `{"items":[{"tenant_id":"t1","resource_id":"q1"},{"tenant_id":"t1"}]}`
	before := jobKeys(r)
	for _, q := range []string{"atomic=1", "atomic=yes", "atomic=TRUE", "atomic=%00", "atomic=", "atomic"} {
		resp, out := post(t, r, "/jobs/rebuild-cache/bulk?"+q, body, bearer(tokenA)...)
		if p := decodeProblem(t, resp, out); p.Status != 400 || p.Field != "atomic" {
			t.Fatalf("%s: %+v", q, p)
		}
	}
	if n := jobKeys(r); n != before {
		t.Fatalf("refused bulks kept %d keys", n-before)
	}
	resp, out := post(t, r, "/jobs/rebuild-cache/bulk?atomic=false", body, bearer(tokenA)...)
	var a bulkAnswer
	if err := json.Unmarshal([]byte(out), &a); err != nil || resp.StatusCode != 200 || a.Atomic || a.Created != 1 {
		t.Fatalf("atomic=false: %d %s", resp.StatusCode, out)
	}
}
