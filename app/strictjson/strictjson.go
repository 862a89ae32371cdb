// Package strictjson decodes JSON the one strict way jobguard reads every body and the SCHEDULES
// variable: exact member names, no duplicates, no unknown members, types as declared. It imports
// only the JSON module; its callers turn a *FieldError into their own answer (a 400, a
// configuration error).
package strictjson

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// FieldError names the field that made a body unreadable, by its dotted path (list.1.b), or
// "body" for the document as a whole.
type FieldError struct {
	Field, Detail string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Detail }

func badField(field, detail string) error { return &FieldError{Field: field, Detail: detail} }

// Decode reads one JSON object into v strictly: member names match the declared names
// exactly (TENANT_ID is not tenant_id), no name appears twice in an object at any depth, no
// unknown members, every type as declared, valid UTF-8, nothing after the object. Errors are
// *FieldError naming the field by its path (list.1.b).
//
// It uses encoding/json/v2's semantics, whose defaults are exactly these (plus
// RejectUnknownMembers). Go 1.26 ships encoding/json/v2 only behind GOEXPERIMENT=jsonv2, so this
// is its upstream module, which turns into aliases of the standard library under that experiment.
func Decode(body []byte, v any) error {
	err := json.Unmarshal(body, v, json.RejectUnknownMembers(true))
	if err == nil {
		return nil
	}
	var sem *json.SemanticError
	var syn *jsontext.SyntacticError
	switch {
	case errors.As(err, &syn) && errors.Is(syn.Err, jsontext.ErrDuplicateName):
		field := fieldPath(syn.JSONPointer)
		return badField(field, field+" appears more than once")
	case errors.As(err, &sem) && errors.Is(sem.Err, json.ErrUnknownName):
		field := fieldPath(sem.JSONPointer)
		return badField(field, "unknown field "+field+" (names are case-sensitive)")
	case errors.As(err, &sem) && sem.JSONPointer != "" && sem.GoType != nil && sem.JSONKind == '0' && jsonKindOf(sem.GoType) == "an integer":
		field := fieldPath(sem.JSONPointer) // a fraction, or out of the type's range
		return badField(field, field+" must be a whole number in range")
	case errors.As(err, &sem) && sem.JSONPointer != "" && sem.GoType != nil && sem.JSONKind != 0:
		field := fieldPath(sem.JSONPointer)
		return badField(field, fmt.Sprintf("%s must be %s, not %s", field, jsonKindOf(sem.GoType), valueKind(sem.JSONKind)))
	case errors.As(err, &sem) && sem.JSONPointer == "":
		return badField("body", "the body must be a JSON object")
	case errors.As(err, &syn):
		return badField("body", "the body is not one JSON object: "+strings.TrimPrefix(syn.Err.Error(), "jsontext: "))
	}
	return badField("body", "the body is not a valid JSON object")
}

// fieldPath writes a JSON pointer (/list/1/b) as the dotted path the API names fields with.
func fieldPath(p jsontext.Pointer) string {
	var parts []string
	for tok := range p.Tokens() {
		parts = append(parts, tok)
	}
	if len(parts) == 0 {
		return "body"
	}
	return strings.Join(parts, ".")
}

// jsonKindOf names what JSON value a Go type takes, as a client writes it ("an integer", not
// "a int").
func jsonKindOf(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a " + t.String()
}

// valueKind names the JSON value a client sent.
func valueKind(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 't', 'f':
		return "a JSON boolean"
	case '"':
		return "a JSON string"
	case '0':
		return "a JSON number"
	case '{':
		return "a JSON object"
	case '[':
		return "a JSON array"
	}
	return "a JSON " + k.String()
}
