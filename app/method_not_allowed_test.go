package app

import (
	"net/http"
	"strings"
	"testing"
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
		{http.MethodGet, "/orders", "POST"},
		{http.MethodDelete, "/stock/t1/sku-1", "GET, HEAD"},
		{http.MethodPost, "/schedules", "GET, HEAD"},
		{http.MethodGet, "/schedules/nightly/pause", "POST"},
		{http.MethodDelete, "/openapi.json", "GET, HEAD"},
	} {
		resp, body := do(t, c.method, r.base+c.path, "", auth...)
		p := decodeProblem(t, resp, body)
		if p.Status != http.StatusMethodNotAllowed || p.Code != CodeMethodNotAllowed || resp.Header.Get("Allow") != c.allow {
			t.Errorf("%s %s: %d %s Allow %q, want 405 method_not_allowed Allow %q", c.method, c.path, p.Status, p.Code, resp.Header.Get("Allow"), c.allow)
		}
	}
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/no/such/route"},
		{http.MethodDelete, "/jobs/x/y/z"},
		{http.MethodPost, "/jobs/no-such-type"}, // the enqueue family: an unknown task type
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
