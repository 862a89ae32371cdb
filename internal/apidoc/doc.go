// Package apidoc builds the API's OpenAPI 3.1 document from code: each route describes itself
// (method, path, parameters, request body, answers per status) as an Operation next to its handler,
// and the JSON Schemas of bodies are reflected from the Go types the handlers decode and answer with.
// Adding a field to a view, or a task type with a route, changes the document; nothing is hand-kept.
//
// Reflection follows encoding/json: the json tag names a member, `omitempty`/`omitzero` (or an
// `openapi:"optional"` tag, for request members that are not marshalled with omitempty) make it
// optional, a pointer without omitempty is nullable, time.Time is a date-time string, a nil-able
// slice or map without omitempty may be null. What the type cannot say (an id's pattern, a status's
// enum, a bound) the `openapi` struct tag says, by reference to a named schema defined once in Go
// (see tag.go). Struct types are closed (additionalProperties false): the API decodes strictly.
package apidoc
