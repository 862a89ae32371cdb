package app

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/tasks/registry"
)

// The description parses and validates as OpenAPI 3.1 (kin-openapi's loader and validator).
func TestOpenAPIDocumentIsValid31(t *testing.T) {
	t.Parallel()
	c, err := openAPI()
	if err != nil {
		t.Fatal(err)
	}
	if !c.doc.IsOpenAPI31OrLater() || c.doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q, want 3.1.0", c.doc.OpenAPI)
	}
	// Every problem code of codes.go is a value of the Problem schema's code, and nothing else is.
	var want []string
	for _, k := range problem.Kinds {
		want = append(want, k.Code)
	}
	var got []string
	for _, v := range c.problem.Properties["code"].Value.Enum {
		got = append(got, v.(string))
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("Problem.code enum %v, want the codes of codes.go %v", got, want)
	}
	// JobStatus lists exactly the engine's statuses.
	var statuses, enum []string
	for _, st := range jobstore.Statuses {
		statuses = append(statuses, string(st))
	}
	for _, v := range c.doc.Components.Schemas["JobStatus"].Value.Enum {
		enum = append(enum, v.(string))
	}
	slices.Sort(statuses)
	slices.Sort(enum)
	if !slices.Equal(statuses, enum) {
		t.Errorf("JobStatus enum %v, want jobstore.Statuses %v", enum, statuses)
	}
	// A problem code a response names is one of them.
	for name, r := range c.doc.Components.Responses {
		for _, mt := range r.Value.Content {
			for _, s := range mt.Schema.Value.AllOf {
				if code := s.Value.Properties["code"]; code != nil {
					for _, v := range code.Value.Enum {
						if !slices.Contains(want, v.(string)) {
							t.Errorf("response %s names code %v, not one of codes.go", name, v)
						}
					}
				}
			}
		}
	}
}

// GET /openapi.json serves the embedded description, without a token even when API_TOKENS is set.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, map[string]string{"API_TOKENS": "token-a-0123456789:t1"})
	resp, body := get(t, r.base+"/openapi.json")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || body != string(openAPIDoc) {
		t.Fatalf("GET /openapi.json: %d %q, %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
	}
	if _, err := openapi3.NewLoader().LoadFromData([]byte(body)); err != nil {
		t.Fatal(err)
	}
}

// Every route the app registers (API, read models and commands of the shipped task types,
// schedules, admin endpoints) is an operation of the description, and every operation is a route:
// the description cannot leave a route out or keep one that is gone.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	t.Parallel()
	c, err := openAPI()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.FromLookup(lookupFrom(map[string]string{"HTTP_ADDR": "127.0.0.1:0", "REDIS_URL": redistest.NewDB(t).URL()}), registry.All())
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(context.Background(), cfg, RoleAll, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	routes := map[string]bool{}
	for _, r := range a.http.GetRoutes(true) {
		if r.Method == http.MethodHead || r.Path == "/monitoring" || strings.HasPrefix(r.Path, "/monitoring/") {
			continue // HEAD follows GET; the UI is not part of the API
		}
		routes[r.Method+" "+r.Path] = true
	}
	ops := map[string]bool{}
	for p, item := range c.doc.Paths.Map() {
		for m, op := range item.Operations() {
			if op.Extensions["x-requires"] == "DATABASE_URL" {
				continue // not served without it (this app has none)
			}
			ops[m+" "+openAPIToFiber(p)] = true
		}
	}
	for r := range routes {
		if !ops[r] {
			t.Errorf("route %s is not in openapi.json", r)
		}
	}
	for op := range ops {
		if !routes[op] {
			t.Errorf("openapi.json has %s, which the app does not serve", op)
		}
	}
}

// The checker itself catches drift: a body that breaks its schema, a status no operation lists.
func TestOpenAPICheckerRefusesDrift(t *testing.T) {
	t.Parallel()
	req, _ := http.NewRequest(http.MethodGet, "http://jobguard.test/healthz", nil)
	answer := func(status int, body any) (*http.Response, []byte) {
		b, _ := json.Marshal(body)
		h := http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"r1"}}
		return &http.Response{StatusCode: status, Header: h, Body: http.NoBody}, b
	}
	resp, body := answer(200, map[string]string{"status": "ok"})
	if err := checkExchange(req, nil, resp, body, false); err != nil {
		t.Fatalf("a valid answer: %v", err)
	}
	resp, body = answer(200, map[string]any{"status": 1})
	if err := checkExchange(req, nil, resp, body, false); err == nil {
		t.Error("a body against its schema passed")
	}
	resp, body = answer(202, map[string]string{"status": "ok"})
	if err := checkExchange(req, nil, resp, body, false); err == nil || !strings.Contains(err.Error(), "202") {
		t.Errorf("an undocumented status: %v", err)
	}
	p := problem.Details{Type: problem.TypeBase + "no_such_code", Code: "no_such_code", Title: "Not Found", Status: 404, Detail: "x"}
	resp, body = answer(404, p)
	resp.Header.Set("Content-Type", problem.ContentType)
	if err := checkExchange(req, nil, resp, body, false); err == nil {
		t.Error("a problem with an unknown code passed")
	}
	c, _ := openAPI()
	good := "id: 0\ndata: {\"at\":1,\"event\":\"enqueued\"}\n\nevent: end\ndata: {\"status\":\"done\"}\n\n"
	if _, err := io.ReadAll(&eventsChecker{ReadCloser: io.NopCloser(strings.NewReader(good)), c: c}); err != nil {
		t.Errorf("a valid event stream: %v", err)
	}
	bad := "event: end\ndata: {\"status\":\"finished\"}\n\n"
	if _, err := io.ReadAll(&eventsChecker{ReadCloser: io.NopCloser(strings.NewReader(bad)), c: c}); err == nil {
		t.Error("an end event with an unknown status passed")
	}
	post, _ := http.NewRequest(http.MethodPost, "http://jobguard.test/jobs/rebuild-cache", bytes.NewReader([]byte(`{"tenant_id":"t1"}`)))
	post.Header.Set("Content-Type", "application/json")
	resp, body = answer(202, map[string]any{"job_id": "0123456789abcdef-0123456789abcdef0123456789ab", "status": "queued", "deduplicated": false})
	resp.Header.Set("Location", "/jobs/0123456789abcdef-0123456789abcdef0123456789ab")
	if err := checkExchange(post, []byte(`{"tenant_id":"t1"}`), resp, body, false); err == nil || !strings.Contains(err.Error(), "refuses the request") {
		t.Errorf("a request the description refuses, answered 202: %v", err)
	}
}
