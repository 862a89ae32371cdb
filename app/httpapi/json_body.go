package httpapi

import (
	"errors"

	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/app/strictjson"
)

// decodeJSON reads a request body into v as strictjson.Decode does; an unreadable body is a 400
// naming the field by its path (list.1.b).
func decodeJSON(body []byte, v any) error {
	err := strictjson.Decode(body, v)
	var fe *strictjson.FieldError
	if errors.As(err, &fe) {
		return problem.BadField(fe.Field, fe.Detail)
	}
	return err
}
