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
