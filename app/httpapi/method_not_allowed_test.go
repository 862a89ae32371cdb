package httpapi

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/jobguard/jobguard/app/problem"
)

// A wrong method on a path a route serves is 405 problem+json naming the path's methods in Allow;
// a path no route serves stays 404, and so does a POST to an unknown task type (the enqueue family).
func TestWrongMethodIs405WithAllow(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAll, map[string]string{"API_TOKENS": "token-a-0123456789:t1"})
	auth := bearer("token-a-0123456789")
	for _, c := range []struct{ method, path, allow string }{
		{http.MethodDelete, "/jobs/0123456789abcdef-0123456789abcdef0123456789ab", "GET, HEAD"},
		{http.MethodPut, "/jobs/no-such-job", "GET, HEAD"},
		{http.MethodGet, "/jobs/x/retry", "POST"},
		{http.MethodGet, "/jobs/x/cancel", "POST"},
		{http.MethodPost, "/jobs/x/events", "GET, HEAD"},
		{http.MethodPost, "/jobs", "GET, HEAD"},
		{http.MethodPut, "/jobs/rebuild-cache/", "GET, HEAD, POST"}, // a task type's route and a job id's
		{http.MethodPost, "/healthz", "GET, HEAD"},
		{http.MethodOptions, "/readyz", "GET, HEAD"},
		{http.MethodPatch, "/metrics", "GET, HEAD"},
		{http.MethodDelete, "/stock/t1/sku-1", "GET, HEAD"},
		{http.MethodPost, "/schedules", "GET, HEAD"},
		{http.MethodGet, "/schedules/nightly/pause", "POST"},
		{http.MethodDelete, "/openapi.json", "GET, HEAD"},
	} {
		resp, body := do(t, c.method, r.base+c.path, "", auth...)
		p := decodeProblem(t, resp, body)
		if p.Status != http.StatusMethodNotAllowed || p.Code != problem.CodeMethodNotAllowed || resp.Header.Get("Allow") != c.allow {
			t.Errorf("%s %s: %d %s Allow %q, want 405 method_not_allowed Allow %q", c.method, c.path, p.Status, p.Code, resp.Header.Get("Allow"), c.allow)
		}
	}
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/no/such/route"},
		{http.MethodDelete, "/jobs/x/y/z"},
		{http.MethodPost, "/jobs/no-such-type"}, // the enqueue family: an unknown task type
		{http.MethodGet, "/orders"},             // served only with DATABASE_URL
	} {
		resp, body := do(t, c.method, r.base+c.path, `{}`, append([]string{"Content-Type", "application/json"}, auth...)...)
		if p := decodeProblem(t, resp, body); p.Status != http.StatusNotFound || resp.Header.Get("Allow") != "" {
			t.Errorf("%s %s: %d Allow %q, want 404 without Allow", c.method, c.path, p.Status, resp.Header.Get("Allow"))
		}
	}
	// HEAD of a wrong method's answer: the same status and Allow, no body.
	resp, _ := do(t, http.MethodHead, r.base+"/jobs/x/retry", "", auth...)
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Errorf("HEAD /jobs/x/retry: %d Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	if !strings.Contains(resp.Header.Get("Content-Type"), "problem+json") {
		t.Errorf("HEAD /jobs/x/retry: content type %q", resp.Header.Get("Content-Type"))
	}
}

func TestMatchPattern(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		pattern, path string
		want          bool
	}{
		{"/jobs/:id", "/jobs/abc", true},
		{"/jobs/:id", "/JOBS/abc/", true},
		{"/jobs/:id", "/jobs/", false},
		{"/jobs/:id", "/jobs/a/b", false},
		{"/jobs/:id/retry", "/jobs/a/retry", true},
		{"/monitoring/*", "/monitoring/api/queues", true},
		{"/", "/", true},
		{"/healthz", "/healthzz", false},
	} {
		if got := matchPattern(c.pattern, c.path); got != c.want {
			t.Errorf("matchPattern(%q, %q) = %v, want %v", c.pattern, c.path, got, c.want)
		}
	}
}

// allowOf is an answer's Allow header and whether it has one (an empty Allow is a resource that
// takes no method now, RFC 9110 section 10.2.1).
func allowOf(resp *http.Response) (string, bool) {
	v, ok := resp.Header[http.CanonicalHeaderKey("Allow")]
	return strings.Join(v, ", "), ok
}

// Every route of the app, and every page of the monitoring UI (served inside its mount, not as a
// route of the app), answers each method it does not take with 405 problem+json and an Allow
// naming exactly those it does; a route this configuration does not serve (POST /orders without
// DATABASE_URL) is 404 for every method.
func TestEveryRouteAnswersAWrongMethodWithAllow(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAll, nil)
	methods := []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions}
	check := func(path string, allow []string) {
		t.Helper()
		for _, m := range methods {
			if slices.Contains(allow, m) || (m == http.MethodPost && matchPattern(enqueueFamily, path)) {
				continue
			}
			resp, body := do(t, m, r.base+path, "")
			got, has := allowOf(resp)
			if resp.StatusCode != http.StatusMethodNotAllowed || !has || got != strings.Join(allow, ", ") {
				t.Errorf("%s %s: %d Allow %q (present %v), want 405 Allow %q", m, path, resp.StatusCode, got, has, strings.Join(allow, ", "))
				continue
			}
			if m != http.MethodHead {
				if p := decodeProblem(t, resp, body); p.Code != problem.CodeMethodNotAllowed {
					t.Errorf("%s %s: code %s", m, path, p.Code)
				}
			}
		}
	}
	for _, rm := range routeTable(r.API().http) {
		path := strings.NewReplacer(":id", "x", ":name", "nightly", ":tenant", "t1", ":resource", "r1", ":sku", "s1").Replace(rm.pattern)
		check(path, allowedMethods(routeTable(r.API().http), path))
	}
	get, post := []string{http.MethodGet, http.MethodHead}, []string{http.MethodPost}
	for _, p := range []struct {
		path  string
		allow []string
	}{
		{"/monitoring/jobs", get}, {"/monitoring/jobs/x", get}, {"/monitoring/jobs/x/cancel", post}, {"/monitoring/jobs/x/retry", post},
		{"/monitoring/schedules", get}, {"/monitoring/schedules/nightly/pause", post}, {"/monitoring/schedules/nightly/resume", post},
		{"/monitoring/", get}, {"/monitoring/queues/default", get}, {"/monitoring/favicon.ico", get}, // asynqmon's files and pages
	} {
		check(p.path, p.allow)
	}
	for _, m := range methods {
		if resp, _ := do(t, m, r.base+"/orders", `{}`, "Content-Type", "application/json"); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s /orders without DATABASE_URL: %d, want 404 as for every method", m, resp.StatusCode)
		}
	}
}

// A read-only UI's change pages take no method: 405 with an empty Allow.
func TestReadOnlyUIChangesAre405WithAnEmptyAllow(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, map[string]string{"MONITORING_READONLY": "true"})
	for _, path := range []string{"/monitoring/jobs/x/cancel", "/monitoring/jobs/x/retry", "/monitoring/schedules/nightly/pause"} {
		resp, body := do(t, http.MethodPost, r.base+path, "")
		got, has := allowOf(resp)
		if p := decodeProblem(t, resp, body); p.Status != http.StatusMethodNotAllowed || !has || got != "" {
			t.Errorf("POST %s on a read-only UI: %d Allow %q (present %v), want 405 with an empty Allow", path, p.Status, got, has)
		}
	}
}
