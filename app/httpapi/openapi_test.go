package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/hibiken/asynq"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/tasks"
	"github.com/jobguard/jobguard/tasks/registry"
	"github.com/jobguard/jobguard/tasks/reservestock"
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
	// The bounds the `openapi` tags write are the code's own limits.
	for _, b := range []struct {
		schema, member, keyword string
		want                    float64
	}{
		{"BulkRequest", "items", "maxItems", engine.MaxBulk},
		{"WorkflowRequest", "nodes", "maxItems", engine.MaxWorkflowNodes},
		{"BatchRequest", "jobs", "maxItems", engine.MaxWorkflowNodes},
		{"ReserveStockJob", "quantity", "maximum", reservestock.MaxQuantity},
	} {
		m := c.doc.Components.Schemas[b.schema].Value.Properties[b.member].Value
		var got float64
		switch {
		case b.keyword == "maximum" && m.Max != nil:
			got = *m.Max
		case b.keyword == "maxItems" && m.MaxItems != nil:
			got = float64(*m.MaxItems)
		}
		if got != b.want {
			t.Errorf("%s.%s %s %v, want %v", b.schema, b.member, b.keyword, got, b.want)
		}
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

// GET /openapi.json serves the generated description, without a token even when API_TOKENS is set.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, map[string]string{"API_TOKENS": "token-a-0123456789:t1"})
	resp, body := get(t, r.base+"/openapi.json")
	want, err := apiDocument(registry.All())
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || body != string(want) {
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
	a, err := newProcess(context.Background(), cfg, RoleAll, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	routes := map[string]bool{}
	for _, r := range a.API().http.GetRoutes(true) {
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

// memo is a task type declared here, as a new file of tasks/ would declare it: a request with an
// optional deadline-like field, a read model with its answer type and a command with its replies.
type memoRequest struct {
	TenantID string     `json:"tenant_id" openapi:"ref=ID"`
	Text     string     `json:"text" openapi:"maxLength=280"`
	Pinned   *bool      `json:"pinned,omitempty"`
	RemindAt *time.Time `json:"remind_at,omitempty"`
}

func (m *memoRequest) Validate() error { return tasks.CheckID("tenant_id", m.TenantID) }
func (m *memoRequest) Tenant() string  { return m.TenantID }
func (m *memoRequest) Spec() engine.Spec {
	return engine.Spec{Type: "memo", Tenant: m.TenantID, Resource: m.TenantID}
}

type memoView struct {
	TenantID string    `json:"tenant_id"`
	Texts    []string  `json:"texts"`
	Updated  time.Time `json:"updated"`
	LastJob  string    `json:"last_job,omitempty" openapi:"ref=JobID"`
}

func memoTask() tasks.Task {
	return tasks.Task{
		Type: "memo", Description: "Keeps a tenant's memo.",
		Request: func() tasks.Request { return &memoRequest{} },
		Handler: func(tasks.Deps) asynq.Handler {
			return asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })
		},
		Routes: []tasks.Route{{Method: http.MethodGet, Path: "/memos/:tenant", Tenant: "tenant",
			Params:  map[string]func(string) error{"tenant": func(v string) error { return tasks.CheckID("tenant", v) }},
			Read:    func(context.Context, tasks.ReadDeps, map[string]string) (any, error) { return memoView{}, nil },
			Summary: "A tenant's memos", Response: memoView{}}},
		Commands: []tasks.Command{{Path: "/memos", Accept: func() tasks.Request { return &memoRequest{} },
			Do: func(context.Context, tasks.ReadDeps, tasks.Request) (tasks.Answer, error) {
				return tasks.Answer{Status: http.StatusCreated, Body: memoView{}}, nil
			},
			Replies: []tasks.Reply{{Status: http.StatusCreated, Description: "Kept.", Body: memoView{}}}}},
	}
}

// The goal of a generated description: a task type with routes, declared here and registered with
// the app, is in the /openapi.json it serves (enqueue and bulk routes, read model, command, their
// bodies' schemas from the Go types) without anyone editing a document; the example types, not
// registered, are not.
func TestOpenAPIDescribesARegisteredTask(t *testing.T) {
	t.Parallel()
	r := startTasks(t, nil, []tasks.Task{memoTask()})
	resp, body := get(t, r.base+"/openapi.json")
	if resp.StatusCode != 200 {
		t.Fatalf("GET /openapi.json: %d %s", resp.StatusCode, body)
	}
	doc, err := openapi3.NewLoader().LoadFromData([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	op := func(method, path string) *openapi3.Operation {
		t.Helper()
		item := doc.Paths.Value(path)
		if item == nil || item.GetOperation(method) == nil {
			t.Fatalf("%s %s is not in /openapi.json", method, path)
		}
		return item.GetOperation(method)
	}
	enqueue := op(http.MethodPost, "/jobs/memo")
	if enqueue.Description != "Keeps a tenant's memo." {
		t.Errorf("POST /jobs/memo: description %q", enqueue.Description)
	}
	req := enqueue.RequestBody.Value.Content.Get("application/json").Schema.Value
	props := slices.Sorted(maps.Keys(req.Properties))
	if want := []string{"pinned", "remind_at", "start_by", "tags", "tenant_id", "text"}; !slices.Equal(props, want) {
		t.Errorf("POST /jobs/memo body members %v, want %v (the request's and the job's own)", props, want)
	}
	if !slices.Equal(req.Required, []string{"tenant_id", "text"}) {
		t.Errorf("required %v, want [tenant_id text] (omitempty members are optional)", req.Required)
	}
	if p := req.Properties["tenant_id"].Value.Pattern; p != tasks.IDPattern {
		t.Errorf("tenant_id pattern %q, want tasks.IDPattern", p)
	}
	if f := req.Properties["remind_at"].Value.Format; f != "date-time" {
		t.Errorf("remind_at format %q, want date-time", f)
	}
	if n := req.Properties["text"].Value.MaxLength; n == nil || *n != 280 {
		t.Errorf("text maxLength %v, want 280", n)
	}
	if ref := op(http.MethodPost, "/jobs/memo/bulk").Responses.Status(200); ref == nil {
		t.Error("POST /jobs/memo/bulk has no 200")
	}
	read := op(http.MethodGet, "/memos/{tenant}")
	view := read.Responses.Status(200).Value.Content.Get("application/json").Schema.Value
	if !slices.Equal(slices.Sorted(maps.Keys(view.Properties)), []string{"last_job", "tenant_id", "texts", "updated"}) {
		t.Errorf("GET /memos/{tenant} answer members %v", slices.Sorted(maps.Keys(view.Properties)))
	}
	if p := view.Properties["last_job"].Value.Pattern; p != jobstore.JobIDPattern {
		t.Errorf("last_job pattern %q, want the job id's", p)
	}
	if read.Summary != "A tenant's memos" || read.Responses.Status(403) == nil {
		t.Errorf("GET /memos/{tenant}: summary %q, 403 %v", read.Summary, read.Responses.Status(403))
	}
	command := op(http.MethodPost, "/memos")
	if command.Responses.Status(http.StatusCreated) == nil || command.RequestBody == nil {
		t.Error("POST /memos: no 201 or no request body")
	}
	for _, p := range []string{"/jobs/rebuild-cache", "/cache/{tenant}/{resource}"} {
		if doc.Paths.Value(p) != nil {
			t.Errorf("%s is described, but this app does not register its task type", p)
		}
	}
}
