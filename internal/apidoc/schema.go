package apidoc

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Schema is a JSON Schema (2020-12, as OpenAPI 3.1 has it) as it is written in the document.
type Schema = map[string]any

// Ref is a schema that refers to the named schema name (Document.Define or Document.Name).
func Ref(name string) Schema { return Schema{"$ref": schemaPrefix + name} }

const schemaPrefix = "#/components/schemas/"

var (
	timeType          = reflect.TypeFor[time.Time]()
	jsonMarshalerType = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// reflector turns Go types into schemas. Types given a name are written once, as a named schema,
// and referred to; every other type is written in place.
type reflector struct {
	names   map[reflect.Type]string
	schemas map[string]Schema
	err     error // the first mistake (a bad tag): Document.JSON returns it
}

func newReflector() reflector {
	return reflector{names: map[reflect.Type]string{}, schemas: map[string]Schema{}}
}

func (r *reflector) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// typeOf is v's type, through a pointer: a request constructor returns *T, the body is a T.
func typeOf(v any) reflect.Type {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// schemaOf is t's schema: a reference when t is named, else written in place.
func (r *reflector) schemaOf(t reflect.Type) Schema {
	if t.Kind() == reflect.Pointer {
		return r.schemaOf(t.Elem())
	}
	if name, ok := r.names[t]; ok {
		if _, done := r.schemas[name]; !done {
			r.schemas[name] = Schema{} // a placeholder first: a type may refer to itself
			r.schemas[name] = r.inline(t)
		}
		return Ref(name)
	}
	return r.inline(t)
}

// inline is t's schema written in place, whatever its name.
func (r *reflector) inline(t reflect.Type) Schema {
	switch {
	case t == timeType:
		return Schema{"type": "string", "format": "date-time"}
	case t.Implements(jsonMarshalerType):
		return Schema{} // json.RawMessage and the like: any JSON
	case t.Implements(textMarshalerType):
		return Schema{"type": "string"}
	}
	switch t.Kind() {
	case reflect.Bool:
		return Schema{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return Schema{"type": "integer"}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return Schema{"type": "integer", "minimum": 0}
	case reflect.Float32, reflect.Float64:
		return Schema{"type": "number"}
	case reflect.String:
		return Schema{"type": "string"}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 && t.Kind() == reflect.Slice {
			return Schema{"type": "string", "contentEncoding": "base64"} // encoding/json's []byte
		}
		return Schema{"type": "array", "items": r.schemaOf(t.Elem())}
	case reflect.Map:
		return Schema{"type": "object", "additionalProperties": r.schemaOf(t.Elem())}
	case reflect.Struct:
		return r.object(t)
	case reflect.Interface:
		return Schema{}
	}
	r.fail(fmt.Errorf("apidoc: %s: a %s has no JSON form", t, t.Kind()))
	return Schema{}
}

// object is a struct's schema: its JSON members, closed.
func (r *reflector) object(t reflect.Type) Schema {
	props := Schema{}
	var required []string
	r.members(t, props, &required)
	s := Schema{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

// members adds t's JSON members to props (and the names of the required ones to required), an
// embedded struct's as encoding/json flattens them.
func (r *reflector) members(t reflect.Type, props Schema, required *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		jsonTag := f.Tag.Get("json")
		if jsonTag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(jsonTag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				r.members(ft, props, required)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		tag, err := parseFieldTag(f.Tag.Get("openapi"))
		if err != nil {
			r.fail(fmt.Errorf("%s.%s: %w", t, f.Name, err))
		}
		omitted := hasOption(opts, "omitempty") || hasOption(opts, "omitzero")
		props[name] = r.member(ft, tag, omitted)
		if !omitted && !tag.optional {
			*required = append(*required, name)
		}
	}
}

// member is one struct member's schema: its type's, as its tag refines it.
func (r *reflector) member(ft reflect.Type, tag fieldTag, omitted bool) Schema {
	var s Schema
	switch {
	case tag.constant != "":
		s = Schema{"const": tag.constant}
	case tag.enum != nil:
		s = Schema{"type": "string", "enum": tag.enum}
	case tag.ref != "":
		s = Ref(tag.ref)
	case tag.items != "" && ft.Kind() == reflect.Map:
		s = Schema{"type": "object", "additionalProperties": Ref(tag.items)}
	case tag.items != "":
		s = Schema{"type": "array", "items": Ref(tag.items)}
	case tag.typ != "":
		s = Schema{"type": tag.typ}
	default:
		s = r.schemaOf(ft)
		if _, isRef := s["$ref"]; isRef {
			s = Schema{"$ref": s["$ref"]} // a copy: bounds below must not reach the named schema
		}
	}
	for k, v := range tag.bounds {
		s[k] = v
	}
	if tag.orEmpty {
		s = Schema{"anyOf": []any{s, Schema{"const": ""}}}
	}
	if tag.nullable || (ft.Kind() == reflect.Pointer && !omitted) {
		s = nullable(s)
	}
	return s
}

// nullable is s that also takes null.
func nullable(s Schema) Schema {
	if typ, ok := s["type"].(string); ok {
		out := Schema{}
		for k, v := range s {
			out[k] = v
		}
		out["type"] = []string{typ, "null"}
		return out
	}
	return Schema{"anyOf": []any{s, Schema{"type": "null"}}}
}

func hasOption(opts, want string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == want {
			return true
		}
	}
	return false
}
