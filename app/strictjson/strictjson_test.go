package strictjson

import (
	"errors"
	"testing"
)

// Every way a body breaks the strict rules is a *FieldError naming the field by its path.
func TestDecodeNamesTheField(t *testing.T) {
	t.Parallel()
	type item struct {
		B int `json:"b"`
	}
	type body struct {
		Name string `json:"name"`
		List []item `json:"list"`
	}
	for in, field := range map[string]string{
		`{"name":"a","name":"b"}`: "name",
		`{"NAME":"a"}`:            "NAME",
		`{"list":[{},{"b":"x"}]}`: "list.1.b",
		`[1]`:                     "body",
		`{"name":"a"} {}`:         "body",
	} {
		var v body
		var fe *FieldError
		if err := Decode([]byte(in), &v); !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s: %v, want a FieldError naming %s", in, err, field)
		}
	}
	var v body
	if err := Decode([]byte(`{"name":"a","list":[{"b":1}]}`), &v); err != nil || v.Name != "a" || v.List[0].B != 1 {
		t.Errorf("a valid body: %+v %v", v, err)
	}
}

// A wrong type is named as a client writes JSON: "an integer", not Go's "a int".
func TestDecodeNamesTheJSONKind(t *testing.T) {
	t.Parallel()
	type body struct {
		N    int      `json:"n"`
		F    float64  `json:"f"`
		S    string   `json:"s"`
		On   bool     `json:"on"`
		List []string `json:"list"`
	}
	for in, want := range map[string]string{
		`{"n":"1"}`:    "n must be an integer, not a JSON string",
		`{"f":"1"}`:    "f must be a number, not a JSON string",
		`{"s":1}`:      "s must be a string, not a JSON number",
		`{"on":1}`:     "on must be true or false, not a JSON number",
		`{"list":{}}`:  "list must be an array, not a JSON object",
		`{"list":[1]}`: "list.0 must be a string, not a JSON number",
		`{"n":1.5}`:    "n must be a whole number in range",
		`{"n":1e99}`:   "n must be a whole number in range",
	} {
		var v body
		var fe *FieldError
		if err := Decode([]byte(in), &v); !errors.As(err, &fe) || fe.Detail != want {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
}
