package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/tasks"
	"github.com/jobguard/jobguard/tasks/registry"
)

// Every HTTP exchange of this package's tests goes through checkExchange: the request and the
// answer are validated against the generated description its app serves (kin-openapi, JSON Schema
// 2020-12 for 3.1; the app's own when it serves task types of the test's, describeTestTasks), and a
// mismatch fails the test. testClient's transport does it for every request sent through do/get/
// post (an event stream's events as the test reads them); keepAlive.roundTrip for the raw-TCP
// requests that parse as HTTP; FuzzEnqueue for its a.API().http.Test requests. Exempt: the monitoring UI
// (/monitoring, not part of the API) and raw requests that are not valid HTTP (they test the parser).

// openAPI is the description of the shipped registry's app, parsed, with its router, built once.
var openAPI = sync.OnceValues(func() (*openAPIChecker, error) { return newOpenAPIChecker(registry.All()) })

// newOpenAPIChecker parses and validates the description of an app serving list, and compiles
// its router.
func newOpenAPIChecker(list []tasks.Task) (*openAPIChecker, error) {
	openAPIDoc, err := apiDocument(list)
	if err != nil {
		return nil, err
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openAPIDoc)
	if err != nil {
		return nil, fmt.Errorf("openapi.json: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("openapi.json: %w", err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi.json: router: %w", err)
	}
	problem := doc.Components.Schemas["Problem"]
	if problem == nil {
		return nil, errors.New("openapi.json: no Problem schema")
	}
	raw, err := jsonschema.UnmarshalJSON(bytes.NewReader(openAPIDoc))
	if err != nil {
		return nil, err
	}
	compiler := jsonschema.NewCompiler()
	compiler.DefaultDraft(jsonschema.Draft2020)
	compiler.AssertFormat()
	if err := compiler.AddResource(openAPIURL, raw); err != nil {
		return nil, err
	}
	return &openAPIChecker{doc: doc, router: router, problem: problem.Value, compiler: compiler, schemas: map[string]*jsonschema.Schema{}}, nil
}

type openAPIChecker struct {
	doc      *openapi3.T
	router   routers.Router
	problem  *openapi3.Schema
	compiler *jsonschema.Compiler

	mu      sync.Mutex
	schemas map[string]*jsonschema.Schema // by JSON pointer
}

// openAPIURL names openapi.json for the schema compiler.
const openAPIURL = "https://jobguard.test/openapi.json"

// appCheckers holds, per app address (host:port), the checker of an app whose task types are not
// the shipped registry's: its exchanges are checked against the description that app serves.
var appCheckers sync.Map // string -> *openAPIChecker

// describeTestTasks makes the exchanges with the app at base, which serves list's task types, be
// checked against that app's own description (their routes included: the document is generated).
func describeTestTasks(t testing.TB, base string, list []tasks.Task) {
	t.Helper()
	c, err := newOpenAPIChecker(list)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(base)
	appCheckers.Store(u.Host, c)
}

// checkerFor is the checker of the app at host: its own (describeTestTasks), or the shipped one's.
func checkerFor(host string) (*openAPIChecker, error) {
	if c, ok := appCheckers.Load(host); ok {
		return c.(*openAPIChecker), nil
	}
	return openAPI()
}

// unreadCodesSet are the kinds of requests that were never routed (unparsed.go): their answer is
// the same on every path, so it is checked against the Problem schema only.
var unreadCodesSet = []string{problem.CodeMalformedRequest, problem.CodeRequestTimeout, problem.CodeBodyTooLarge, problem.CodeHeaderTooLarge, problem.CodeUnknownMethod}

// checkExchange validates one request (its body as sent) and its answer (body as read; nil and
// stream true for a server-sent event stream the caller reads itself).
func checkExchange(req *http.Request, reqBody []byte, resp *http.Response, respBody []byte, stream bool) error {
	if p := req.URL.Path; p == "/monitoring" || strings.HasPrefix(p, "/monitoring/") {
		return nil // the embedded UI: not part of the API
	}
	c, err := checkerFor(req.URL.Host)
	if err != nil {
		return err
	}
	head := req.Method == http.MethodHead
	ct := resp.Header.Get("Content-Type")
	isProblem := mediaType(ct) == problem.ContentType
	if resp.Header.Get("X-Request-ID") == "" {
		return errors.New("no X-Request-ID")
	}
	var prob problem.Details
	if isProblem && !head {
		if err := c.checkProblem(respBody, resp.StatusCode, &prob); err != nil {
			return err
		}
		if slices.Contains(unreadCodesSet, prob.Code) {
			return nil
		}
	}
	if resp.StatusCode >= 400 && !isProblem {
		return fmt.Errorf("an error answer of type %q, not %s", ct, problem.ContentType)
	}
	// Route the request as GET when it is a HEAD: every GET path answers HEAD.
	routed := req.Clone(context.Background())
	routed.Body = io.NopCloser(bytes.NewReader(reqBody))
	if head {
		routed.Method = http.MethodGet
	}
	if p := routed.URL.Path; len(p) > 1 && strings.HasSuffix(p, "/") {
		routed.URL.Path = strings.TrimSuffix(p, "/") // Fiber's routing ignores a trailing slash (StrictRouting off)
	}
	route, params, err := c.router.FindRoute(routed)
	switch {
	case errors.Is(err, routers.ErrPathNotFound):
		if resp.StatusCode != http.StatusNotFound {
			return fmt.Errorf("the path is not in the description, but the answer is %d (want 404)", resp.StatusCode)
		}
		return nil
	case errors.Is(err, routers.ErrMethodNotAllowed):
		// A path of the description with another method: 405 with Allow, or 404 for POST
		// /jobs/<segment> (the enqueue family: an unknown task type).
		if resp.StatusCode == http.StatusNotFound && req.Method == http.MethodPost && matchPattern(enqueueFamily, req.URL.Path) {
			return nil
		}
		if resp.StatusCode == http.StatusNotFound && c.requiresConfig(req.URL.Path) {
			return nil // not served in this configuration: 404 for every method
		}
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") == "" {
			return fmt.Errorf("the method is not one the description gives the path, but the answer is %d, Allow %q (want 405 with Allow)",
				resp.StatusCode, resp.Header.Get("Allow"))
		}
		return c.checkAllow(req.URL.Path, resp.Header.Get("Allow"))
	case err != nil:
		return fmt.Errorf("route: %w", err)
	}
	if resp.StatusCode == http.StatusMethodNotAllowed {
		return fmt.Errorf("405 for %s, an operation of the description", req.Method)
	}

	// kin-openapi checks parameters, status and headers; bodies are checked against schemas compiled
	// once (bodySchema): kin-openapi compiles a 3.1 schema anew at every validation, 30 ms a body
	// under -race, which would make this package's tests minutes slower.
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true,
		MultiError: true, ExcludeRequestBody: true, ExcludeResponseBody: true}
	in := &openapi3filter.RequestValidationInput{Request: routed, PathParams: params, Route: route, Options: opts}
	reqErr := openapi3filter.ValidateRequest(context.Background(), in)
	if reqErr == nil {
		reqErr = c.checkRequestBody(route, req.Header.Get("Content-Type"), reqBody)
	}
	if reqErr != nil && resp.StatusCode < 400 {
		return fmt.Errorf("the description refuses the request, but the answer is %d: %w", resp.StatusCode, reqErr)
	}
	ref := route.Operation.Responses.Status(resp.StatusCode)
	if ref == nil {
		return fmt.Errorf("status %d is not one the description gives %s %s", resp.StatusCode, route.Method, route.Path)
	}
	if head {
		return nil // no body; kin-openapi checks nothing else of a HEAD answer
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Options: opts}
	out.SetBodyBytes(respBody)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		return err
	}
	base := ref.Ref
	if base == "" {
		base = "#/paths/" + pointerEscape(route.Path) + "/" + strings.ToLower(route.Method) + "/responses/" + strconv.Itoa(resp.StatusCode)
	}
	key, mt := contentFor(ref.Value.Content, ct)
	if mt == nil {
		return fmt.Errorf("content type %q is not one the description gives status %d", ct, resp.StatusCode)
	}
	if stream || mt.Schema == nil || !strings.HasSuffix(mediaType(ct), "json") {
		return nil // an event stream the test reads itself, or text (/metrics)
	}
	return c.checkBody(base+"/content/"+pointerEscape(key)+"/schema", respBody)
}

// checkRequestBody validates a request body against the operation's request body, nil when the
// description takes it.
func (c *openAPIChecker) checkRequestBody(route *routers.Route, ct string, body []byte) error {
	rb := route.Operation.RequestBody
	if rb == nil {
		return nil // a body the operation does not describe is ignored by the server too
	}
	if len(body) == 0 {
		if rb.Value.Required {
			return errors.New("the request body is required")
		}
		return nil
	}
	key, mt := contentFor(rb.Value.Content, ct)
	if mt == nil {
		return fmt.Errorf("request content type %q is not one the description takes", ct)
	}
	base := rb.Ref
	if base == "" {
		base = "#/paths/" + pointerEscape(route.Path) + "/" + strings.ToLower(route.Method) + "/requestBody"
	}
	return c.checkBody(base+"/content/"+pointerEscape(key)+"/schema", body)
}

// contentFor is the media type of content that ct matches, and its key.
func contentFor(content openapi3.Content, ct string) (string, *openapi3.MediaType) {
	mt := content.Get(ct)
	for k, v := range content {
		if v == mt {
			return k, v
		}
	}
	return "", nil
}

// checkBody validates a JSON body against the schema at ptr (a JSON pointer into openapi.json).
func (c *openAPIChecker) checkBody(ptr string, body []byte) error {
	s, err := c.bodySchema(ptr)
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("body is not JSON: %w", err)
	}
	if err := s.Validate(v); err != nil {
		return fmt.Errorf("body does not match %s: %w", ptr, err)
	}
	return nil
}

// bodySchema compiles the schema at ptr once (JSON Schema 2020-12, formats asserted, as OpenAPI
// 3.1 has it).
func (c *openAPIChecker) bodySchema(ptr string) (*jsonschema.Schema, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.schemas[ptr]; ok {
		return s, nil
	}
	s, err := c.compiler.Compile(openAPIURL + ptr)
	if err != nil {
		return nil, fmt.Errorf("openapi.json: compile %s: %w", ptr, err)
	}
	c.schemas[ptr] = s
	return s, nil
}

// pointerEscape is s as a JSON pointer token in a URI fragment.
func pointerEscape(s string) string {
	return url.PathEscape(strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1"))
}

// checkProblem validates a problem+json body against the Problem schema and its status.
func (c *openAPIChecker) checkProblem(body []byte, status int, p *problem.Details) error {
	if err := c.checkBody("#/components/schemas/Problem", body); err != nil {
		return err
	}
	_ = json.Unmarshal(body, p)
	if p.Status != status || p.Type != problem.TypeBase+p.Code {
		return fmt.Errorf("problem %+v does not match its answer %d", p, status)
	}
	return nil
}

// checkAllow says whether Allow lists exactly the methods the description gives the path (HEAD
// with GET).
func (c *openAPIChecker) checkAllow(path, allow string) error {
	var want []string
	for p, item := range c.doc.Paths.Map() {
		if !matchPattern(openAPIToFiber(p), path) {
			continue
		}
		for m := range item.Operations() {
			want = append(want, m)
			if m == http.MethodGet {
				want = append(want, http.MethodHead)
			}
		}
	}
	got := strings.Split(allow, ", ")
	slices.Sort(got)
	slices.Sort(want)
	want = slices.Compact(want)
	if !slices.Equal(got, want) {
		return fmt.Errorf("Allow %q, but the description gives the path %v", allow, want)
	}
	return nil
}

// requiresConfig says whether path is an operation's that is served only with a variable set
// (`x-requires`, e.g. POST /orders with DATABASE_URL).
func (c *openAPIChecker) requiresConfig(path string) bool {
	for p, item := range c.doc.Paths.Map() {
		if !matchPattern(openAPIToFiber(p), path) {
			continue
		}
		for _, op := range item.Operations() {
			if op.Extensions["x-requires"] != nil {
				return true
			}
		}
	}
	return false
}

// openAPIToFiber turns "/jobs/{id}" into "/jobs/:id".
func openAPIToFiber(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
			segs[i] = ":" + s[1:len(s)-1]
		}
	}
	return strings.Join(segs, "/")
}

func mediaType(ct string) string {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return ct
	}
	return mt
}

// checkingTransport validates every exchange against the description (checkExchange); a mismatch
// is the request's error, so the test that sent it fails.
type checkingTransport struct{ next http.RoundTripper }

func (t checkingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		reqBody = b
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	stream := mediaType(resp.Header.Get("Content-Type")) == "text/event-stream"
	var body []byte
	if !stream {
		body, err = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
	}
	if err := checkExchange(req, reqBody, resp, body, stream); err != nil {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("openapi.json: %s %s answered %d %.300s: %w", req.Method, req.URL.RequestURI(), resp.StatusCode, body, err)
	}
	if stream && resp.StatusCode == http.StatusOK {
		c, _ := checkerFor(req.URL.Host) // checkExchange loaded it
		resp.Body = &eventsChecker{ReadCloser: resp.Body, c: c, workflow: strings.HasPrefix(req.URL.Path, "/workflows/")}
	}
	return resp, nil
}

// eventsChecker checks a server-sent event stream as the test reads it: each event's data must be
// an Event, the data of `event: end` an EventEnd (openapi.json's components); on a workflow's
// stream a WorkflowNodeEvent and a WorkflowEventEnd. A mismatch is the read's error.
type eventsChecker struct {
	io.ReadCloser
	c        *openAPIChecker
	workflow bool   // GET /workflows/{id}/events
	partial  []byte // the last line, not ended yet
	end      bool   // the event being read is `event: end`
}

func (e *eventsChecker) Read(p []byte) (int, error) {
	n, err := e.ReadCloser.Read(p)
	e.partial = append(e.partial, p[:n]...)
	for {
		i := bytes.IndexByte(e.partial, '\n')
		if i < 0 {
			break
		}
		line := string(e.partial[:i])
		e.partial = e.partial[i+1:]
		switch {
		case line == "":
			e.end = false
		case line == "event: end":
			e.end = true
		case strings.HasPrefix(line, "data: "):
			schema := "#/components/schemas/Event"
			switch {
			case e.workflow && e.end:
				schema = "#/components/schemas/WorkflowEventEnd"
			case e.workflow:
				schema = "#/components/schemas/WorkflowNodeEvent"
			case e.end:
				schema = "#/components/schemas/EventEnd"
			}
			if cerr := e.c.checkBody(schema, []byte(strings.TrimPrefix(line, "data: "))); cerr != nil {
				return n, fmt.Errorf("openapi.json: event stream: %w", cerr)
			}
		}
	}
	return n, err
}
