package httpapi

import (
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/app/problem"
)

// Tags in an enqueue body: folded and kept (GET /jobs/{id}, GET /jobs), 400 naming tags when they
// break the rules. GET /jobs searches by tag (any or all), creation window and error text, within
// the token's tenant; bad search parameters are 400 naming them. Every exchange is checked
// against openapi.json.
func TestTagsAndSearch(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, twoTenants) // no worker: the jobs stay queued
	enqueue := func(token, tenant, res, tags string) string {
		t.Helper()
		body := `{"tenant_id":"` + tenant + `","resource_id":"` + res + `"`
		if tags != "" {
			body += `,"tags":` + tags
		}
		resp, out := post(t, r, "/jobs/rebuild-cache", body+"}", bearer(token)...)
		if resp.StatusCode != 202 {
			t.Fatalf("enqueue %s: %d %s", body, resp.StatusCode, out)
		}
		return resp.Header.Get("Location")[len("/jobs/"):]
	}
	before := time.Now().Add(-time.Second)
	eu := enqueue(tokenA, "t1", "a", `["eu","nightly","eu"]`)
	us := enqueue(tokenA, "t1", "b", `["us","nightly"]`)
	plain := enqueue(tokenA, "t1", "c", "")
	_ = enqueue(tokenB, "t2", "a", `["eu"]`)

	var v jobView
	if code := getJSON(t, r, "/jobs/"+eu, &v, bearer(tokenA)...); code != 200 || !slices.Equal(v.Tags, []string{"eu", "nightly"}) {
		t.Fatalf("view's tags: %d %v", code, v.Tags)
	}
	for _, bad := range []string{`["a b"]`, `[""]`, `["` + strings.Repeat("x", 65) + `"]`, `"eu"`, `[1]`,
		`["1","2","3","4","5","6","7","8","9"]`} {
		resp, out := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"z","tags":`+bad+`}`, bearer(tokenA)...)
		var p problem.Details
		if resp.StatusCode != 400 || json.Unmarshal([]byte(out), &p) != nil || p.Field != "tags" {
			t.Fatalf("tags %s: %d %s, want 400 naming tags", bad, resp.StatusCode, out)
		}
	}

	ids := func(query string) []string {
		t.Helper()
		var l listView
		if code := getJSON(t, r, "/jobs?"+query, &l, bearer(tokenA)...); code != 200 {
			t.Fatalf("GET /jobs?%s: %d", query, code)
		}
		var out []string
		for _, j := range l.Jobs {
			out = append(out, j.JobID)
		}
		return out
	}
	stamp := func(at time.Time) string { return url.QueryEscape(at.UTC().Format(time.RFC3339)) }
	for query, want := range map[string][]string{
		"tag=eu":                            {eu},
		"tag=nightly":                       {us, eu},
		"tag=eu&tag=us":                     {us, eu},
		"tag=eu&tag=us&tags_match=any":      {us, eu},
		"tag=eu&tag=us&tags_match=all":      nil,
		"tag=eu&tag=nightly&tags_match=all": {eu},
		"tag=mars":                          nil,
		"created_after=" + stamp(before):    {plain, us, eu},
		"created_before=" + stamp(before):   nil,
		"created_after=" + stamp(time.Now().Add(time.Hour)): nil,
		"error=nothing+failed":                              nil,
		"tag=nightly&status=queued&type=rebuild-cache":      {us, eu},
	} {
		if got := ids(query); !slices.Equal(got, want) {
			t.Errorf("GET /jobs?%s: %v, want %v", query, got, want)
		}
	}
	var l listView
	if getJSON(t, r, "/jobs?tag=eu", &l, bearer(tokenA)...); len(l.Jobs) != 1 || !slices.Equal(l.Jobs[0].Tags, []string{"eu", "nightly"}) {
		t.Fatalf("listed tags: %+v", l.Jobs)
	}
	for path, field := range map[string]string{
		"/jobs?tag=a+b": "tag", "/jobs?tags_match=some": "tags_match", "/jobs?created_after=yesterday": "created_after",
		"/jobs?created_before=1": "created_before", "/jobs?error=" + strings.Repeat("e", 201): "error",
	} {
		var p problem.Details
		if code := getJSON(t, r, path, &p, bearer(tokenA)...); code != 400 || p.Field != field {
			t.Errorf("%s: %d %+v, want 400 naming %s", path, code, p, field)
		}
	}
}
