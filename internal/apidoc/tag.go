package apidoc

import (
	"fmt"
	"strconv"
	"strings"
)

// fieldTag is a struct field's `openapi` tag: comma-separated words, each a flag or key=value.
//
//	optional       the member may be absent (a request member without omitempty)
//	nullable       the member may be null
//	ref=Name       the member's schema is the named schema Name (Document.Define)
//	items=Name     a slice's elements (or a map's values) are the named schema Name
//	orEmpty        the member is its schema or "" (a status not known yet)
//	const=v        the member is always v (a string)
//	type=t         the member's JSON type, for a type that says nothing (json.RawMessage: type=object)
//	enum=a|b       the member is one of the strings a, b
//	min=n max=n    an integer's bounds
//	maxLength=n    a string's bound
//	minItems=n maxItems=n  a slice's bounds
//
// Patterns never appear in a tag (a regexp may hold a comma): a patterned string is a named schema.
type fieldTag struct {
	optional, nullable, orEmpty bool
	ref, items, constant, typ   string
	enum                        []string
	bounds                      map[string]int64 // JSON Schema keyword -> value
}

// boundKeys maps a tag key to its JSON Schema keyword.
var boundKeys = map[string]string{
	"min": "minimum", "max": "maximum", "maxLength": "maxLength", "minItems": "minItems", "maxItems": "maxItems",
}

func parseFieldTag(tag string) (fieldTag, error) {
	var t fieldTag
	if tag == "" {
		return t, nil
	}
	for _, word := range strings.Split(tag, ",") {
		key, value, hasValue := strings.Cut(word, "=")
		switch {
		case word == "optional":
			t.optional = true
		case word == "nullable":
			t.nullable = true
		case word == "orEmpty":
			t.orEmpty = true
		case key == "ref" && hasValue:
			t.ref = value
		case key == "items" && hasValue:
			t.items = value
		case key == "type" && hasValue:
			t.typ = value
		case key == "const" && hasValue:
			t.constant = value
		case key == "enum" && hasValue:
			t.enum = strings.Split(value, "|")
		case boundKeys[key] != "" && hasValue:
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil {
				return t, fmt.Errorf("apidoc: tag %q: %s is not an integer", tag, key)
			}
			if t.bounds == nil {
				t.bounds = map[string]int64{}
			}
			t.bounds[boundKeys[key]] = n
		default:
			return t, fmt.Errorf("apidoc: tag %q: unknown word %q", tag, word)
		}
	}
	return t, nil
}
