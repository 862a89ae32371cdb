package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/jobguard/jobguard/app/problem"
)

// recordKeys counts the keys a request would leave behind: jobguard's keys but the rate limiter's
// buckets, which every request (accepted or not) takes from.
func recordKeys(r *running) int {
	n := 0
	for _, k := range r.Redis().Keys(context.Background(), "jobguard:*").Val() {
		if !strings.Contains(k, "{ratelimit:") {
			n++
		}
	}
	return n
}

// An Idempotency-Key header that is present but empty (or only blanks) is malformed, not absent.
func TestEmptyIdempotencyKeyIs400(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, nil)
	addr := strings.TrimPrefix(r.base, "http://")
	before := recordKeys(r)
	for _, value := range []string{"", "   "} {
		k := dialKeepAlive(t, addr)
		resp, body, err := k.roundTrip(http.MethodPost, rawRequest(http.MethodPost, "/jobs/rebuild-cache",
			`{"tenant_id":"t1","resource_id":"r"}`, "Content-Type", "application/json", "Idempotency-Key", value))
		if err != nil {
			t.Fatal(err)
		}
		if p := decodeProblem(t, resp, body); p.Status != http.StatusBadRequest || p.Field != "Idempotency-Key" {
			t.Errorf("Idempotency-Key %q: %+v", value, p)
		}
	}
	if n := recordKeys(r); n != before {
		t.Errorf("a refused request left %d keys behind", n-before)
	}
	// Without the header the request is accepted as before.
	if resp, body := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"r"}`); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("no Idempotency-Key: %d %s", resp.StatusCode, body)
	}
}

// Strict JSON: member names match the declared names exactly and appear once, at every depth.
func TestStrictJSONOverHTTP(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, nil)
	before := recordKeys(r)
	for _, tc := range []struct{ name, path, body, field string }{
		{"duplicate member", "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"a","resource_id":"b"}`, "resource_id"},
		{"duplicate tenant", "/jobs/rebuild-cache", `{"tenant_id":"t2","resource_id":"a","tenant_id":"t1"}`, "tenant_id"},
		{"upper-case name", "/jobs/rebuild-cache", `{"TENANT_ID":"t1","resource_id":"a"}`, "TENANT_ID"},
		{"mixed-case name", "/jobs/reserve-stock", `{"tenant_id":"t1","Order_Id":"o","sku":"s","quantity":1}`, "Order_Id"},
		{"unknown member", "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"a","x":1}`, "x"},
		{"wrong type", "/jobs/reserve-stock", `{"tenant_id":"t1","order_id":"o","sku":"s","quantity":"3"}`, "quantity"},
	} {
		resp, body := post(t, r, tc.path, tc.body)
		if p := decodeProblem(t, resp, body); p.Status != http.StatusBadRequest || p.Field != tc.field || !strings.Contains(p.Detail, tc.field) {
			t.Errorf("%s: %+v, want 400 naming %s", tc.name, p, tc.field)
		}
	}
	if n := recordKeys(r); n != before {
		t.Errorf("refused requests left %d keys behind", n-before)
	}
}

type strictInner struct {
	B int `json:"b"`
}

type strictOuter struct {
	A     strictInner   `json:"a"`
	List  []strictInner `json:"list"`
	Extra map[string]int
}

// decodeJSON checks nested objects the same way, and names the nested member by its path.
func TestDecodeJSONNested(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ body, field string }{
		{`{"a":{"b":1,"b":2}}`, "a.b"},
		{`{"list":[{"b":1},{"b":1,"b":2}]}`, "list.1.b"},
		{`{"a":{"B":1}}`, "a.B"},
		{`{"Extra":{"k":1,"k":2}}`, "Extra.k"},
		{`{"extra":{"k":1}}`, "extra"},
		{`{"a":{"b":1},"a":{"b":1}}`, "a"},
		{`{"a":{"b":"x"}}`, "a.b"},
	} {
		var v strictOuter
		err := decodeJSON([]byte(tc.body), &v)
		he, ok := err.(*problem.HTTPError)
		if !ok || he.Status != http.StatusBadRequest || he.Field != tc.field {
			t.Errorf("%s: %v (%#v), want a 400 naming %s", tc.body, err, err, tc.field)
		}
	}
	var v strictOuter
	if err := decodeJSON([]byte(`{"a":{"b":1},"list":[{"b":2}],"Extra":{"k":3,"l":4}}`), &v); err != nil || v.A.B != 1 || v.List[0].B != 2 || v.Extra["l"] != 4 {
		t.Fatalf("valid body: %v %+v", err, v)
	}
}

// The auth scheme is case-insensitive (RFC 9110 section 11.1); the token is not.
func TestBearerScheme(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, twoTenants)
	for i, tc := range []struct {
		auth string
		want int
	}{
		{"Bearer " + tokenA, http.StatusAccepted},
		{"bearer " + tokenA, http.StatusAccepted},
		{"BEARER " + tokenA, http.StatusAccepted},
		{"bEaReR  " + tokenA, http.StatusAccepted},
		{"Bearer " + strings.ToUpper(tokenA), http.StatusUnauthorized},
		{"Bearer " + tokenA[:len(tokenA)-1], http.StatusUnauthorized},
		{"Bearer " + tokenA + "x", http.StatusUnauthorized},
		{"Bearer" + tokenA, http.StatusUnauthorized},
		{"Basic " + tokenA, http.StatusUnauthorized},
		{"Bearer ", http.StatusUnauthorized},
		{tokenA, http.StatusUnauthorized},
	} {
		body := `{"tenant_id":"t1","resource_id":"r` + string(rune('a'+i)) + `"}`
		resp, got := post(t, r, "/jobs/rebuild-cache", body, "Authorization", tc.auth)
		if resp.StatusCode != tc.want {
			t.Errorf("Authorization %q: %d, want %d: %s", tc.auth, resp.StatusCode, tc.want, got)
		}
		if tc.want == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("Authorization %q: 401 without WWW-Authenticate", tc.auth)
		}
	}
}
