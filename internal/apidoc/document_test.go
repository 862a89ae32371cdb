package apidoc

import (
	"context"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

type greeting struct {
	Text string `json:"text"`
}

type problem struct {
	Code string `json:"code"`
}

// newTestDocument is a small document: a shared header, parameter and problem answer, and one
// operation with a Fiber path, a request body and answers of each kind.
func newTestDocument() *Document {
	d := New(Info{Title: "test", Version: "1", License: "MIT", Description: "A test."})
	d.Tags = []Tag{{Name: "greetings", Description: "Hello."}}
	d.Security = []string{"bearer", ""}
	d.Problem = "Problem"
	d.SecurityScheme("bearer", SecurityScheme{Scheme: "bearer", Description: "A token."})
	d.Define("Problem", problem{})
	d.Name(greeting{}, "Greeting")
	d.Describe("Greeting", "What is said.")
	d.Header("X-Request-ID", Header{Description: "The request's id.", Schema: Schema{"type": "string"}})
	d.Parameter("Name", Param{Name: "name", In: "path", Schema: Schema{"type": "string"}})
	d.Response("NotFound", Response{Description: "No such name.", Headers: []string{"X-Request-ID"}, Codes: []string{"not_found"}})
	d.Add(Operation{
		Method: "POST", Path: "/greetings/:name", ID: "greet", Summary: "Greet", Tags: []string{"greetings"},
		Params:  []Param{{Ref: "Name"}, {Name: "loud", In: "query", Type: true}, {Name: "tag", In: "query", Explode: true, Schema: Schema{"type": "array"}}},
		Request: greeting{},
		Responses: []Response{
			{Status: 201, Description: "Greeted.", Headers: []string{"X-Request-ID"}, Body: greeting{},
				OwnHeaders: map[string]Header{"Location": {Schema: Schema{"type": "string"}, Required: true}}},
			{Status: 404, Ref: "NotFound"},
			{Status: 409, Description: "Twice.", Codes: []string{"again"}},
		},
		Extensions: map[string]any{"x-requires": "NAME"},
	}, Operation{
		Method: "GET", Path: "/metrics", ID: "metrics", Summary: "Metrics", Security: []string{},
		Responses: []Response{{Status: 200, Description: "Text.", Content: map[string]any{"text/plain": Schema{"type": "string"}}}},
	})
	return d
}

// The document is OpenAPI 3.1 that kin-openapi loads and validates, with the Fiber path turned
// into OpenAPI's, references resolved, and a problem answer narrowed to its codes.
func TestDocumentIsValidOpenAPI31(t *testing.T) {
	t.Parallel()
	b, err := newTestDocument().JSON()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" || doc.Info.License.Identifier != "MIT" {
		t.Errorf("openapi %q, license %+v", doc.OpenAPI, doc.Info.License)
	}
	item := doc.Paths.Value("/greetings/{name}")
	if item == nil || item.Post == nil {
		t.Fatalf("POST /greetings/{name} is missing: %v", doc.Paths.InMatchingOrder())
	}
	op := item.Post
	if op.RequestBody.Value.Content.Get("application/json").Schema.Ref != "#/components/schemas/Greeting" || !op.RequestBody.Value.Required {
		t.Errorf("request body %+v", op.RequestBody.Value)
	}
	if len(op.Parameters) != 3 || op.Parameters[0].Value.Name != "name" || op.Parameters[1].Value.Schema.Value.Type.Slice()[0] != "boolean" ||
		!*op.Parameters[2].Value.Explode {
		t.Errorf("parameters %+v", op.Parameters)
	}
	created := op.Responses.Status(201).Value
	if created.Headers["Location"].Value == nil || !created.Headers["Location"].Value.Required || created.Headers["X-Request-ID"].Ref == "" {
		t.Errorf("201 headers %+v", created.Headers)
	}
	conflict := op.Responses.Status(409).Value.Content.Get("application/problem+json").Schema.Value
	if len(conflict.AllOf) != 2 || conflict.AllOf[0].Ref != "#/components/schemas/Problem" ||
		conflict.AllOf[1].Value.Properties["code"].Value.Enum[0] != "again" {
		t.Errorf("409 schema %+v", conflict)
	}
	if g := doc.Components.Schemas["Greeting"]; g == nil || g.Value.Description != "What is said." {
		t.Errorf("Greeting %+v, want its description", g)
	}
	if op.Extensions["x-requires"] != "NAME" {
		t.Errorf("extensions %v", op.Extensions)
	}
	if sec := doc.Paths.Value("/metrics").Get.Security; sec == nil || len(*sec) != 0 {
		t.Errorf("GET /metrics security %v, want none", sec)
	}
	if len(doc.Security) != 2 || len(doc.Security[1]) != 0 {
		t.Errorf("document security %v, want a token or none", doc.Security)
	}
}

// The document's own mistakes are errors, not a document a client trips on later.
func TestDocumentMistakes(t *testing.T) {
	t.Parallel()
	twice := newTestDocument()
	twice.Add(Operation{Method: "POST", Path: "/greetings/{name}", ID: "again", Summary: "Again"})
	if _, err := twice.JSON(); err == nil || !strings.Contains(err.Error(), "described twice") {
		t.Errorf("an operation twice: %v", err)
	}
	undefined := newTestDocument()
	undefined.Add(Operation{Method: "GET", Path: "/x", ID: "x", Summary: "x", Responses: []Response{{Status: 200, Description: "x", Body: Ref("Nowhere")}}})
	if _, err := undefined.JSON(); err == nil || !strings.Contains(err.Error(), "Nowhere") {
		t.Errorf("a reference to nothing: %v", err)
	}
	undescribed := newTestDocument()
	undescribed.Describe("Nowhere", "x")
	if _, err := undescribed.JSON(); err == nil || !strings.Contains(err.Error(), "Nowhere") {
		t.Errorf("a description of nothing: %v", err)
	}
	noResponse := newTestDocument()
	noResponse.Add(Operation{Method: "GET", Path: "/y", ID: "y", Summary: "y", Responses: []Response{{Status: 400, Ref: "BadRequest"}}})
	if _, err := noResponse.JSON(); err == nil || !strings.Contains(err.Error(), "BadRequest") {
		t.Errorf("an answer never defined: %v", err)
	}
}

// Built twice, the document is the same bytes: /openapi.json does not change between processes.
func TestDocumentIsStable(t *testing.T) {
	t.Parallel()
	a, err := newTestDocument().JSON()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := newTestDocument().JSON()
	if string(a) != string(b) {
		t.Error("two builds differ")
	}
}
