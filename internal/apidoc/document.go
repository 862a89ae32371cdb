package apidoc

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Document is an OpenAPI 3.1 document under construction: its shared parts (schemas, answers,
// parameters, headers, security schemes) are defined once by name, its operations added by the
// routes that serve them. JSON writes it.
type Document struct {
	Info Info
	Tags []Tag
	// Security is every operation's security unless it says its own: the names of the schemes any
	// one of which is enough, "" for none (the API is open when no token is configured).
	Security []string
	// Problem names the schema of problem+json answers (Response.Codes narrows its code).
	Problem string

	ops             []Operation
	descriptions    map[string]string // named schema -> its description
	securitySchemes map[string]SecurityScheme
	responses       map[string]Response
	parameters      map[string]Param
	headers         map[string]Header
	reflector
}

// Info is the document's info object.
type Info struct {
	Title, Version, Description string
	// License is an SPDX identifier, e.g. "MIT".
	License string
}

// Tag groups operations.
type Tag struct{ Name, Description string }

// SecurityScheme is an HTTP authentication scheme, e.g. bearer.
type SecurityScheme struct{ Scheme, Description string }

// Header is a response header.
type Header struct {
	Description string
	Required    bool
	Schema      Schema
}

// Param is an operation's parameter: a reference to a named one (Ref), or written in place.
type Param struct {
	Ref         string
	Name        string
	In          string // "path", "query" or "header"
	Description string
	Required    bool // a path parameter always is
	// Schema is the parameter's schema; nil: Type's.
	Schema Schema
	// Type is a value of the parameter's Go type.
	Type any
	// Explode is true for a repeated query parameter (form style, one name=value per element).
	Explode bool
}

// Response is one answer of an operation: a reference to a named one (Ref), or written in place.
type Response struct {
	Status      int
	Ref         string
	Description string
	// Headers name headers defined with Document.Header.
	Headers []string
	// OwnHeaders are headers written in place, by name (e.g. a Location of another form).
	OwnHeaders map[string]Header
	// Body is the answer's schema (a Schema) or a value of the Go type the handler answers with.
	Body any
	// ContentType of Body; default application/json.
	ContentType string
	// Content gives several content types, each with its schema (a Schema or a Go value), when
	// Body and ContentType are not enough (e.g. text and OpenMetrics).
	Content map[string]any
	// Codes make the answer a problem+json of Document.Problem whose code is one of them.
	Codes []string
}

// Operation is one method on one path: what a route says of itself.
type Operation struct {
	Method string
	// Path is Fiber's ("/jobs/:id") or OpenAPI's ("/jobs/{id}").
	Path        string
	ID, Summary string
	Description string
	Tags        []string
	Params      []Param
	// Request is the body the handler decodes: a value of its Go type, or a Schema; nil: none.
	Request any
	// RequestOptional says the body may be left out.
	RequestOptional bool
	Responses       []Response
	// Security overrides Document.Security when not nil; empty: no authentication.
	Security []string
	// Extensions are x- members, e.g. "x-requires".
	Extensions map[string]any
}

// New is an empty document.
func New(info Info) *Document {
	return &Document{
		Info: info, securitySchemes: map[string]SecurityScheme{}, responses: map[string]Response{},
		parameters: map[string]Param{}, headers: map[string]Header{}, reflector: newReflector(),
		descriptions: map[string]string{},
	}
}

// Name makes v's Go type a named schema: wherever the type appears, the document refers to name,
// written from the type unless Define gave name a Schema (an enum type: its values).
func (d *Document) Name(v any, name string) { d.names[typeOf(v)] = name }

// Define adds the named schema name: s when it is a Schema, else v's Go type written under name.
func (d *Document) Define(name string, v any) {
	if s, ok := v.(Schema); ok {
		d.schemas[name] = s
		return
	}
	d.Name(v, name)
	d.schemaOf(typeOf(v))
}

// SchemaOf is the schema of v (a Schema, or a value of a Go type).
func (d *Document) SchemaOf(v any) Schema {
	if s, ok := v.(Schema); ok {
		return s
	}
	return d.schemaOf(typeOf(v))
}

// Merge is one object schema holding the members of every struct of vs (in place, not named):
// the body of a route that splits its members between several types.
func (d *Document) Merge(vs ...any) Schema {
	props := Schema{}
	var required []string
	for _, v := range vs {
		t := typeOf(v)
		if t.Kind() != reflect.Struct {
			d.fail(fmt.Errorf("apidoc: Merge: %s is not a struct", t))
			continue
		}
		d.members(t, props, &required)
	}
	s := Schema{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

// Describe gives the named schema name a description (what its type's doc comment says, which
// reflection cannot read).
func (d *Document) Describe(name, text string) { d.descriptions[name] = text }

// SecurityScheme defines a bearer-token scheme.
func (d *Document) SecurityScheme(name string, s SecurityScheme) { d.securitySchemes[name] = s }

// Header defines a named response header.
func (d *Document) Header(name string, h Header) { d.headers[name] = h }

// Parameter defines a named parameter.
func (d *Document) Parameter(name string, p Param) { d.parameters[name] = p }

// Response defines a named answer.
func (d *Document) Response(name string, r Response) { d.responses[name] = r }

// Add adds operations; a method and path given twice is an error of JSON.
func (d *Document) Add(ops ...Operation) { d.ops = append(d.ops, ops...) }

// JSON is the document, or the first mistake made building it (a bad tag, an operation twice, a
// reference to nothing named).
func (d *Document) JSON() ([]byte, error) {
	paths := map[string]map[string]any{}
	for _, op := range d.ops {
		p := openAPIPath(op.Path)
		m := strings.ToLower(op.Method)
		if paths[p] == nil {
			paths[p] = map[string]any{}
		}
		if _, dup := paths[p][m]; dup {
			return nil, fmt.Errorf("apidoc: %s %s is described twice", op.Method, p)
		}
		paths[p][m] = d.operation(op)
	}
	// Answers and parameters before the schemas are read: they may name schemas of their own.
	responses, parameters := d.responseObjects(), d.paramObjects()
	for name, text := range d.descriptions {
		s, ok := d.schemas[name]
		if !ok {
			return nil, fmt.Errorf("apidoc: Describe(%q): no such schema", name)
		}
		s["description"] = text
	}
	components := map[string]any{
		"schemas": d.schemas, "securitySchemes": d.schemeObjects(), "headers": d.headerObjects(),
		"parameters": parameters, "responses": responses,
	}
	doc := map[string]any{
		"openapi": "3.1.0", "info": d.infoObject(), "servers": []any{map[string]any{"url": "/"}},
		"security": securityObject(d.Security), "tags": d.tagObjects(), "paths": paths, "components": components,
	}
	if d.err != nil {
		return nil, d.err
	}
	if err := d.checkRefs(doc); err != nil {
		return nil, err
	}
	return json.MarshalIndent(doc, "", "  ")
}

func (d *Document) operation(op Operation) map[string]any {
	o := map[string]any{"operationId": op.ID, "summary": op.Summary}
	if op.Description != "" {
		o["description"] = op.Description
	}
	if len(op.Tags) > 0 {
		o["tags"] = op.Tags
	}
	var params []any
	for _, p := range op.Params {
		params = append(params, d.paramObject(p))
	}
	if len(params) > 0 {
		o["parameters"] = params
	}
	if op.Request != nil {
		o["requestBody"] = map[string]any{
			"required": !op.RequestOptional,
			"content":  map[string]any{"application/json": map[string]any{"schema": d.SchemaOf(op.Request)}},
		}
	}
	responses := map[string]any{}
	for _, r := range op.Responses {
		responses[strconv.Itoa(r.Status)] = d.responseObject(r)
	}
	o["responses"] = responses
	if op.Security != nil {
		o["security"] = securityObject(op.Security)
	}
	for k, v := range op.Extensions {
		o[k] = v
	}
	return o
}

func (d *Document) responseObject(r Response) map[string]any {
	if r.Ref != "" {
		return map[string]any{"$ref": "#/components/responses/" + r.Ref}
	}
	o := map[string]any{"description": r.Description}
	if len(r.Headers)+len(r.OwnHeaders) > 0 {
		h := map[string]any{}
		for _, name := range r.Headers {
			h[name] = map[string]any{"$ref": "#/components/headers/" + name}
		}
		for name, header := range r.OwnHeaders {
			h[name] = headerObject(header)
		}
		o["headers"] = h
	}
	switch {
	case r.Codes != nil:
		narrow := Schema{"properties": Schema{"code": Schema{"enum": r.Codes}}}
		schema := Schema{"allOf": []any{Ref(d.Problem), narrow}}
		o["content"] = map[string]any{"application/problem+json": map[string]any{"schema": schema}}
	case r.Content != nil:
		content := map[string]any{}
		for ct, v := range r.Content {
			content[ct] = map[string]any{"schema": d.SchemaOf(v)}
		}
		o["content"] = content
	case r.Body != nil:
		ct := r.ContentType
		if ct == "" {
			ct = "application/json"
		}
		o["content"] = map[string]any{ct: map[string]any{"schema": d.SchemaOf(r.Body)}}
	}
	return o
}

func (d *Document) paramObject(p Param) map[string]any {
	if p.Ref != "" {
		return map[string]any{"$ref": "#/components/parameters/" + p.Ref}
	}
	o := map[string]any{"name": p.Name, "in": p.In}
	if p.Description != "" {
		o["description"] = p.Description
	}
	if p.Required || p.In == "path" {
		o["required"] = true
	}
	if p.Explode {
		o["style"], o["explode"] = "form", true
	}
	switch {
	case p.Schema != nil:
		o["schema"] = p.Schema
	case p.Type != nil:
		o["schema"] = d.SchemaOf(p.Type)
	default:
		o["schema"] = Schema{"type": "string"}
	}
	return o
}

func (d *Document) infoObject() map[string]any {
	o := map[string]any{"title": d.Info.Title, "version": d.Info.Version}
	if d.Info.Description != "" {
		o["description"] = d.Info.Description
	}
	if d.Info.License != "" {
		o["license"] = map[string]any{"name": d.Info.License, "identifier": d.Info.License}
	}
	return o
}

func (d *Document) tagObjects() []any {
	var out []any
	for _, t := range d.Tags {
		o := map[string]any{"name": t.Name}
		if t.Description != "" {
			o["description"] = t.Description
		}
		out = append(out, o)
	}
	return out
}

func (d *Document) schemeObjects() map[string]any {
	out := map[string]any{}
	for name, s := range d.securitySchemes {
		out[name] = map[string]any{"type": "http", "scheme": s.Scheme, "description": s.Description}
	}
	return out
}

func (d *Document) headerObjects() map[string]any {
	out := map[string]any{}
	for name, h := range d.headers {
		out[name] = headerObject(h)
	}
	return out
}

func headerObject(h Header) map[string]any {
	o := map[string]any{"schema": h.Schema}
	if h.Description != "" {
		o["description"] = h.Description
	}
	if h.Required {
		o["required"] = true
	}
	return o
}

func (d *Document) paramObjects() map[string]any {
	out := map[string]any{}
	for name, p := range d.parameters {
		out[name] = d.paramObject(p)
	}
	return out
}

func (d *Document) responseObjects() map[string]any {
	out := map[string]any{}
	for name, r := range d.responses {
		out[name] = d.responseObject(r)
	}
	return out
}

// securityObject is a security requirement list: each name alone is enough, "" is none at all.
func securityObject(names []string) []any {
	out := []any{}
	for _, n := range names {
		if n == "" {
			out = append(out, map[string]any{})
			continue
		}
		out = append(out, map[string]any{n: []string{}})
	}
	return out
}

// openAPIPath turns Fiber's "/jobs/:id" into "/jobs/{id}".
func openAPIPath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if strings.HasPrefix(s, ":") {
			segs[i] = "{" + s[1:] + "}"
		}
	}
	return strings.Join(segs, "/")
}

// checkRefs finds a $ref to a component that was never defined: a typo in a tag or a route
// description would otherwise only show when a client resolves it.
func (d *Document) checkRefs(v any) error {
	switch v := v.(type) {
	case map[string]any:
		if ref, ok := v["$ref"].(string); ok && !d.defined(ref) {
			return fmt.Errorf("apidoc: %s is referred to but not defined", ref)
		}
		for _, e := range v {
			if err := d.checkRefs(e); err != nil {
				return err
			}
		}
	case map[string]map[string]any:
		for _, e := range v {
			if err := d.checkRefs(e); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range v {
			if err := d.checkRefs(e); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *Document) defined(ref string) bool {
	kind, name, ok := strings.Cut(strings.TrimPrefix(ref, "#/components/"), "/")
	if !ok {
		return false
	}
	switch kind {
	case "schemas":
		_, ok = d.schemas[name]
	case "responses":
		_, ok = d.responses[name]
	case "parameters":
		_, ok = d.parameters[name]
	case "headers":
		_, ok = d.headers[name]
	default:
		ok = false
	}
	return ok
}
