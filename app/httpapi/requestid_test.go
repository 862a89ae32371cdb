package httpapi

import (
	"net/http"
	"strings"
	"testing"
)

// A client's X-Request-ID is adopted only when it is 1-128 plain characters; anything else is
// replaced, so it never reaches the answer or the log as sent.
func TestClientRequestIDIsBounded(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, nil)
	for _, c := range []struct {
		sent  string
		adopt bool
	}{
		{"abc-123.def:9", true},
		{strings.Repeat("a", 129), false},
		{"two words", false},
		{"<script>", false},
	} {
		resp, _ := get(t, r.base+"/healthz", "X-Request-ID", c.sent)
		got := resp.Header.Get("X-Request-ID")
		if resp.StatusCode != http.StatusOK || (got == c.sent) != c.adopt || got == "" || len(got) > 128 {
			t.Errorf("X-Request-ID %q: answered %d with %q (adopt %v)", c.sent, resp.StatusCode, got, c.adopt)
		}
	}
}

// The rate limiter reads tenant_id with the enqueue's strict names: TENANT_ID names no tenant, so
// it cannot pick (or spend) a tenant's budget.
func TestRateLimiterReadsTenantStrictly(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, map[string]string{"RATE_LIMIT": "1", "RATE_LIMIT_BURST": "1"})
	resp, _ := post(t, r, "/jobs/rebuild-cache", `{"TENANT_ID":"victim","resource_id":"x"}`)
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("TENANT_ID: %d", resp.StatusCode)
	}
	if n := len(r.Redis().Keys(t.Context(), "jobguard:{ratelimit:tenant:victim}").Val()); n != 0 {
		t.Fatal("a request naming TENANT_ID spent the tenant's budget")
	}
	resp, body := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"victim","resource_id":"x"}`)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("the tenant's own first request: %d %s", resp.StatusCode, body)
	}
}
