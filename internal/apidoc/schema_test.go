package apidoc

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

type inner struct {
	N int `json:"n"`
}

type embedded struct {
	Shared string `json:"shared"`
}

type view struct {
	embedded
	Name      string          `json:"name"`
	Note      string          `json:"note,omitempty"`
	Count     uint            `json:"count"`
	Ratio     float64         `json:"ratio"`
	When      time.Time       `json:"when"`
	Maybe     *time.Time      `json:"maybe"`
	Later     *time.Time      `json:"later,omitempty"`
	Inner     inner           `json:"inner"`
	List      []inner         `json:"list" openapi:"nullable"`
	ByName    map[string]int  `json:"by_name"`
	Raw       json.RawMessage `json:"raw"`
	Any       any             `json:"any"`
	Status    string          `json:"status" openapi:"ref=Status,orEmpty"`
	IDs       []string        `json:"ids" openapi:"items=ID,maxItems=3"`
	Kind      string          `json:"kind" openapi:"enum=a|b"`
	Fixed     string          `json:"fixed" openapi:"const=x"`
	Asked     string          `json:"asked" openapi:"optional,maxLength=9"`
	Skipped   string          `json:"-"`
	unexposed string
	Default   bool
	Bounded   int `json:"bounded" openapi:"min=1,max=5"`
}

// schemaJSON is the schema of v as the document writes it.
func schemaJSON(t *testing.T, d *Document, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(d.SchemaOf(v))
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// Every rule of the reflection, member by member: json names and omissions, optional and
// required, nullable pointers, date-times, named references, the tag's refinements.
func TestSchemaFollowsEncodingJSON(t *testing.T) {
	t.Parallel()
	d := New(Info{})
	s := schemaJSON(t, d, &view{unexposed: "not in the JSON"})
	props := s["properties"].(map[string]any)
	for name, want := range map[string]string{
		"shared":  `{"type":"string"}`,
		"count":   `{"minimum":0,"type":"integer"}`,
		"ratio":   `{"type":"number"}`,
		"when":    `{"format":"date-time","type":"string"}`,
		"maybe":   `{"format":"date-time","type":["string","null"]}`,
		"later":   `{"format":"date-time","type":"string"}`,
		"inner":   `{"additionalProperties":false,"properties":{"n":{"type":"integer"}},"required":["n"],"type":"object"}`,
		"list":    `{"items":{"additionalProperties":false,"properties":{"n":{"type":"integer"}},"required":["n"],"type":"object"},"type":["array","null"]}`,
		"by_name": `{"additionalProperties":{"type":"integer"},"type":"object"}`,
		"raw":     `{}`,
		"any":     `{}`,
		"status":  `{"anyOf":[{"$ref":"#/components/schemas/Status"},{"const":""}]}`,
		"ids":     `{"items":{"$ref":"#/components/schemas/ID"},"maxItems":3,"type":"array"}`,
		"kind":    `{"enum":["a","b"],"type":"string"}`,
		"fixed":   `{"const":"x"}`,
		"asked":   `{"maxLength":9,"type":"string"}`,
		"Default": `{"type":"boolean"}`,
		"bounded": `{"maximum":5,"minimum":1,"type":"integer"}`,
	} {
		if got := jsonOf(props[name]); got != want {
			t.Errorf("%s: %s, want %s", name, got, want)
		}
	}
	for _, absent := range []string{"Skipped", "-", "unexposed", "embedded"} {
		if _, ok := props[absent]; ok {
			t.Errorf("%s is a member", absent)
		}
	}
	required := jsonOf(s["required"])
	for _, name := range []string{`"name"`, `"shared"`, `"maybe"`, `"status"`, `"Default"`} {
		if !strings.Contains(required, name) {
			t.Errorf("%s is not required: %s", name, required)
		}
	}
	for _, name := range []string{`"note"`, `"later"`, `"asked"`} {
		if strings.Contains(required, name) {
			t.Errorf("%s is required: %s", name, required)
		}
	}
	if s["additionalProperties"] != false {
		t.Error("a struct's schema is open")
	}
}

// A named type is written once, under its name, and referred to wherever it appears; a member's
// bounds do not leak into the named schema.
func TestNamedTypesAreReferred(t *testing.T) {
	t.Parallel()
	d := New(Info{})
	d.Name(inner{}, "Inner")
	type outer struct {
		A inner   `json:"a"`
		B []inner `json:"b" openapi:"maxItems=2"`
		C *inner  `json:"c,omitempty"`
	}
	s := schemaJSON(t, d, outer{})
	got := jsonOf(s["properties"])
	want := `{"a":{"$ref":"#/components/schemas/Inner"},"b":{"items":{"$ref":"#/components/schemas/Inner"},"maxItems":2,"type":"array"},` +
		`"c":{"$ref":"#/components/schemas/Inner"}}`
	if got != want {
		t.Errorf("members %s, want %s", got, want)
	}
	if jsonOf(d.schemas["Inner"]) != `{"additionalProperties":false,"properties":{"n":{"type":"integer"}},"required":["n"],"type":"object"}` {
		t.Errorf("Inner: %s", jsonOf(d.schemas["Inner"]))
	}
}

// Merge joins the members of several structs into one closed object: a body split between types.
func TestMerge(t *testing.T) {
	t.Parallel()
	d := New(Info{})
	type extra struct {
		At time.Time `json:"at,omitzero"`
	}
	s := d.Merge(&inner{}, extra{})
	if got := jsonOf(s); got != `{"additionalProperties":false,"properties":{"at":{"format":"date-time","type":"string"},"n":{"type":"integer"}},"required":["n"],"type":"object"}` {
		t.Errorf("merged %s", got)
	}
}

// A tag the reflection does not understand is an error of the document, not a silent default.
func TestBadTagIsAnError(t *testing.T) {
	t.Parallel()
	for _, tag := range []string{"min=one", "requird", "ref"} {
		if _, err := parseFieldTag(tag); err == nil {
			t.Errorf("tag %q: no error", tag)
		}
	}
	type bad struct {
		N int `json:"n" openapi:"maximum=3"`
	}
	d := New(Info{Title: "t", Version: "1"})
	d.Add(Operation{Method: "POST", Path: "/x", ID: "x", Summary: "x", Request: bad{}})
	if _, err := d.JSON(); err == nil || !strings.Contains(err.Error(), "maximum=3") {
		t.Errorf("JSON: %v, want the bad tag named", err)
	}
}

type color string

// An enum type is named once with its values (Define, then Name): every member of the type refers
// to them, with no tag.
func TestEnumType(t *testing.T) {
	t.Parallel()
	d := New(Info{})
	d.Define("Color", Schema{"type": "string", "enum": []color{"red", "green"}})
	d.Name(color(""), "Color")
	type paint struct {
		Color color `json:"color"`
	}
	if got := jsonOf(schemaJSON(t, d, paint{})["properties"]); got != `{"color":{"$ref":"#/components/schemas/Color"}}` {
		t.Errorf("members %s", got)
	}
	if got := jsonOf(d.schemas["Color"]); got != `{"enum":["red","green"],"type":"string"}` {
		t.Errorf("Color %s", got)
	}
}
