package httpapi

import (
	"cmp"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/pgtest"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// letGo deletes a job's Redis record, timeline and index entries: what the end of JOB_RETENTION
// does in Redis.
func letGo(t *testing.T, r *running, id string) {
	t.Helper()
	keys := r.Redis().Keys(t.Context(), "jobguard:*:job:"+id+"*").Val()
	if len(keys) == 0 || len(keys) > 2 { // the record, and its timeline unless folded (done on the happy path)
		t.Fatalf("record keys of %s: %v", id, keys)
	}
	r.Redis().Del(t.Context(), keys...)
	for _, index := range r.Redis().Keys(t.Context(), "jobguard:{jobs*").Val() {
		r.Redis().ZRem(t.Context(), index, id)
	}
}

// walk reads every page of path (limit 2) for token and returns the job ids in list order.
func walk(t *testing.T, r *running, path, token string) []string {
	t.Helper()
	var ids []string
	cursor := ""
	for range 20 {
		var p listView
		q := path + "&limit=2"
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		if code := getJSON(t, r, q, &p, bearer(token)...); code != 200 {
			t.Fatalf("%s: %d", q, code)
		}
		for _, j := range p.Jobs {
			ids = append(ids, j.JobID)
		}
		if cursor = p.NextCursor; cursor == "" {
			return ids
		}
	}
	t.Fatalf("%s: more than 20 pages", path)
	return nil
}

// listOrder is ids in the list's order: created millisecond (the id's), then id, newest first.
func listOrder(ids []string) []string {
	out := slices.Clone(ids)
	slices.SortFunc(out, func(a, b string) int {
		if c := cmp.Compare(jobstore.CreatedMS(b), jobstore.CreatedMS(a)); c != 0 {
			return c
		}
		return strings.Compare(b, a)
	})
	return out
}

// With DATABASE_URL, GET /jobs walks the Redis index and then the SQL history of the jobs Redis
// let go: every job once, newest first, the filters hold on SQL rows, another tenant's history
// is never listed, and a cursor no list handed out is 400.
func TestListContinuesIntoSQLHistory(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": pgtest.NewDB(t), "DATABASE_MIGRATE": "true", "REDIS_URL": redistest.NewDB(t).URL()}
	for k, v := range twoTenants {
		env[k] = v
	}
	r := startApp(t, RoleAll, env)
	enqueue := func(path, body, token string) string {
		resp, answer := post(t, r, path, body, bearer(token)...)
		if resp.StatusCode != 202 {
			t.Fatalf("enqueue %s: %d %s", body, resp.StatusCode, answer)
		}
		return resp.Header.Get("Location")[len("/jobs/"):]
	}
	// Oldest first; t2's jobs are interleaved so its history rows sit among t1's.
	var t1, t2 []string
	for i, res := range []string{"a", "b", "c", "d"} {
		t1 = append(t1, enqueue("/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"`+res+`"}`, tokenA))
		if i < 2 {
			t1 = append(t1, enqueue("/jobs/reserve-stock", `{"tenant_id":"t1","order_id":"o`+res+`","sku":"s1","quantity":1}`, tokenA))
		}
		t2 = append(t2, enqueue("/jobs/rebuild-cache", `{"tenant_id":"t2","resource_id":"`+res+`"}`, tokenB))
	}
	// t1: rebuild a, reserve oa, rebuild b, reserve ob, rebuild c, rebuild d.
	for _, id := range t1 {
		waitJob(t, r, id, "done", bearer(tokenA)...)
	}
	for _, id := range t2 {
		waitJob(t, r, id, "done", bearer(tokenB)...)
	}
	testsupport.Eventually(t, 20*time.Second, "every job's copy", func() bool {
		var n int
		_ = r.API().deps.SQL.QueryRow(t.Context(), "SELECT count(*) FROM jobguard_job_history").Scan(&n)
		return n == len(t1)+len(t2)
	})
	// Redis lets the oldest go: t1's three oldest (likely one of them a reserve-stock job) and all
	// of t2's.
	newestFirst, t2newest := listOrder(t1), listOrder(t2)
	gone := newestFirst[3:]
	for _, id := range append(slices.Clone(gone), t2...) {
		letGo(t, r, id)
	}
	// A copy that ended failed (the status filter must read SQL's).
	if _, err := r.API().deps.SQL.Exec(t.Context(), `UPDATE jobguard_job_history SET status = 'failed',
		record = jsonb_set(record, '{status}', '"failed"') WHERE job_id = $1`, gone[2]); err != nil {
		t.Fatal(err)
	}
	if got := walk(t, r, "/jobs?", tokenA); !slices.Equal(got, newestFirst) {
		t.Fatalf("t1 walk:\n got %v\nwant %v", got, newestFirst)
	}
	var one listView
	if code := getJSON(t, r, "/jobs?limit=50", &one, bearer(tokenA)...); code != 200 || len(one.Jobs) != len(t1) || one.NextCursor != "" {
		t.Fatalf("one page: %d %+v", code, one)
	}
	if j := one.Jobs[len(t1)-1]; j.JobID != gone[2] || j.Type == "" || j.Queue == "" || j.Status != "failed" || j.CreatedAt == nil || j.FinishedAt == nil {
		t.Fatalf("a job read from SQL: %+v", j)
	}
	if got, want := walk(t, r, "/jobs?type=reserve-stock", tokenA), listOrder([]string{t1[1], t1[3]}); !slices.Equal(got, want) {
		t.Fatalf("type filter: %v, want %v", got, want)
	}
	if got := walk(t, r, "/jobs?status=failed", tokenA); !slices.Equal(got, gone[2:]) {
		t.Fatalf("status failed: %v, want %v", got, gone[2:])
	}
	if got, want := walk(t, r, "/jobs?status=done", tokenA), newestFirst[:5]; !slices.Equal(got, want) {
		t.Fatalf("status done: %v, want %v", got, want)
	}
	if got := walk(t, r, "/jobs?", tokenB); !slices.Equal(got, t2newest) {
		t.Fatalf("t2 walk: %v, want %v", got, t2newest)
	}
	for _, bad := range []string{"sql.zz", "sql.", "sql." + strings.Repeat("A", 8)} {
		resp, body := get(t, r.base+"/jobs?cursor="+url.QueryEscape(bad), bearer(tokenA)...)
		if p := decodeProblem(t, resp, body); p.Status != 400 || p.Field != "cursor" {
			t.Errorf("cursor %q: %+v", bad, p)
		}
	}
	resp, body := get(t, r.base+"/jobs?status=sleeping", bearer(tokenA)...)
	if p := decodeProblem(t, resp, body); p.Status != 400 || !strings.Contains(p.Detail, "expired") {
		t.Errorf("bad status: %+v", p)
	}
}

// With DATABASE_URL the search goes on into the SQL history: tags (any, all), the window and the
// error text select copies of jobs Redis let go as they select retained jobs.
func TestSearchContinuesIntoSQLHistory(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": pgtest.NewDB(t), "DATABASE_MIGRATE": "true", "REDIS_URL": redistest.NewDB(t).URL()}
	for k, v := range twoTenants {
		env[k] = v
	}
	r := startApp(t, RoleAll, env)
	enqueue := func(res, tags string) string {
		resp, answer := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"`+res+`","tags":`+tags+`}`, bearer(tokenA)...)
		if resp.StatusCode != 202 {
			t.Fatalf("enqueue %s: %d %s", res, resp.StatusCode, answer)
		}
		return resp.Header.Get("Location")[len("/jobs/"):]
	}
	before := time.Now().Add(-time.Second)
	old1 := enqueue("a", `["eu","nightly"]`)
	old2 := enqueue("b", `["us"]`)
	recent := enqueue("c", `["eu"]`)
	for _, id := range []string{old1, old2, recent} {
		waitJob(t, r, id, "done", bearer(tokenA)...)
	}
	testsupport.Eventually(t, 20*time.Second, "every job's copy", func() bool {
		var n int
		_ = r.API().deps.SQL.QueryRow(t.Context(), "SELECT count(*) FROM jobguard_job_history WHERE cardinality(tags) > 0").Scan(&n)
		return n == 3
	})
	letGo(t, r, old1)
	letGo(t, r, old2)
	if _, err := r.API().deps.SQL.Exec(t.Context(), `UPDATE jobguard_job_history SET record = jsonb_set(record, '{last_error}', '"Upstream TIMEOUT"') WHERE job_id = $1`, old2); err != nil {
		t.Fatal(err)
	}
	stamp := url.QueryEscape(before.UTC().Format(time.RFC3339))
	for query, want := range map[string][]string{
		"tag=eu":                            {recent, old1},
		"tag=eu&tag=us":                     {recent, old2, old1},
		"tag=eu&tag=nightly&tags_match=all": {old1},
		"error=timeout":                     {old2},
		"tag=us&created_after=" + stamp:     {old2},
		"tag=us&created_before=" + stamp:    nil,
	} {
		if got := walk(t, r, "/jobs?"+query, tokenA); !slices.Equal(got, listOrder(want)) {
			t.Errorf("GET /jobs?%s: %v, want %v", query, got, listOrder(want))
		}
	}
	var one listView
	if code := getJSON(t, r, "/jobs?tag=nightly", &one, bearer(tokenA)...); code != 200 || len(one.Jobs) != 1 || !slices.Equal(one.Jobs[0].Tags, []string{"eu", "nightly"}) {
		t.Fatalf("a tagged copy listed: %d %+v", code, one)
	}
	if got := walk(t, r, "/jobs?tag=eu", tokenB); len(got) != 0 {
		t.Fatalf("t2 sees t1's tagged copies: %v", got)
	}
}
