package httpapi

import (
	"net/url"
	"testing"
)

// GET /jobs: the token's tenant's jobs only, newest first, page by page with the cursor; filters,
// bad parameters and another tenant's name are refused.
func TestListEndpoint(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, twoTenants) // no worker: the jobs stay queued
	var ids []string
	for _, res := range []string{"a", "b", "c"} {
		resp, body := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"`+res+`"}`, bearer(tokenA)...)
		if resp.StatusCode != 202 {
			t.Fatalf("enqueue: %d %s", resp.StatusCode, body)
		}
		ids = append(ids, resp.Header.Get("Location")[len("/jobs/"):])
	}
	if resp, body := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t2","resource_id":"a"}`, bearer(tokenB)...); resp.StatusCode != 202 {
		t.Fatalf("enqueue: %d %s", resp.StatusCode, body)
	}
	var p1, p2 listView
	if code := getJSON(t, r, "/jobs?limit=2", &p1, bearer(tokenA)...); code != 200 || len(p1.Jobs) != 2 || p1.NextCursor == "" {
		t.Fatalf("page 1: %d %+v", code, p1)
	}
	if code := getJSON(t, r, "/jobs?limit=2&cursor="+url.QueryEscape(p1.NextCursor), &p2, bearer(tokenA)...); code != 200 || len(p2.Jobs) != 1 || p2.NextCursor != "" {
		t.Fatalf("page 2: %d %+v", code, p2)
	}
	// Newest first (jobs of one millisecond are in id order: the store's test covers that).
	all := append(p1.Jobs, p2.Jobs...)
	seen := map[string]bool{}
	for i, j := range all {
		seen[j.JobID] = true
		if i > 0 && j.CreatedAt.After(*all[i-1].CreatedAt) {
			t.Fatalf("not newest first: %+v", all)
		}
	}
	if len(seen) != 3 || !seen[ids[0]] || !seen[ids[1]] || !seen[ids[2]] {
		t.Fatalf("listed %+v, want %v", all, ids)
	}
	if j := p1.Jobs[0]; j.Type != "rebuild-cache" || j.Tenant != "t1" || j.Status != "queued" || j.CreatedAt == nil {
		t.Fatalf("listed job: %+v", j)
	}
	var b listView
	if code := getJSON(t, r, "/jobs", &b, bearer(tokenB)...); code != 200 || len(b.Jobs) != 1 {
		t.Fatalf("t2: %d %+v", code, b)
	}
	var done listView
	if code := getJSON(t, r, "/jobs?status=done", &done, bearer(tokenA)...); code != 200 || len(done.Jobs) != 0 {
		t.Fatalf("status filter: %d %+v", code, done)
	}
	for path, want := range map[string]int{
		"/jobs?limit=0": 400, "/jobs?limit=201": 400, "/jobs?status=sleeping": 400, "/jobs?cursor=zz": 400,
		"/jobs?tenant=t2": 403, "/jobs?tenant=t1": 200,
	} {
		if code := getJSON(t, r, path, nil, bearer(tokenA)...); code != want {
			t.Errorf("%s: %d, want %d", path, code, want)
		}
	}
	if code := getJSON(t, r, "/jobs", nil); code != 401 {
		t.Errorf("without a token: %d", code)
	}
}

// An open API (no API_TOKENS) lists every tenant's jobs without tenant= (its operator routes are
// open too; jobguard jobs list relies on it), each naming its tenant, and tenant='s with it.
func TestListEndpointOnAnOpenAPI(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, nil)
	for _, tenant := range []string{"t1", "t2"} {
		if resp, body := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"`+tenant+`","resource_id":"a"}`); resp.StatusCode != 202 {
			t.Fatalf("enqueue: %d %s", resp.StatusCode, body)
		}
	}
	var all, one listView
	if code := getJSON(t, r, "/jobs", &all); code != 200 || len(all.Jobs) != 2 || all.Jobs[0].Tenant == all.Jobs[1].Tenant || all.Jobs[0].Tenant == "" || all.Jobs[1].Tenant == "" {
		t.Fatalf("every tenant's: %d %+v", code, all)
	}
	if code := getJSON(t, r, "/jobs?tenant=t1", &one); code != 200 || len(one.Jobs) != 1 || one.Jobs[0].Tenant != "t1" {
		t.Fatalf("t1's: %d %+v", code, one)
	}
}
