package httpapi

import (
	"net/http"

	"github.com/jobguard/jobguard/internal/apidoc"
)

// problemStatus is the status of each shared problem answer (the document's components.responses),
// so a route names the answers it can give and their statuses cannot drift from the components.
var problemStatus = map[string]int{
	"BadRequest":           http.StatusBadRequest,
	"Unauthorized":         http.StatusUnauthorized,
	"OperatorUnauthorized": http.StatusUnauthorized,
	"Forbidden":            http.StatusForbidden,
	"OperatorForbidden":    http.StatusForbidden,
	"NotFound":             http.StatusNotFound,
	"NotServed":            http.StatusNotFound,
	"IdempotencyInFlight":  http.StatusConflict,
	"BodyTooLarge":         http.StatusRequestEntityTooLarge,
	"UnsupportedMediaType": http.StatusUnsupportedMediaType,
	"IdempotencyKeyReused": http.StatusUnprocessableEntity,
	"RateLimited":          http.StatusTooManyRequests,
	"EventsLimited":        http.StatusTooManyRequests,
	"Internal":             http.StatusInternalServerError,
	"Unavailable":          http.StatusServiceUnavailable,
}

// The shared problem answers of each kind of route.
var (
	// tenantRead: a tenant reads one thing by id.
	tenantRead = []string{"BadRequest", "Unauthorized", "NotFound", "RateLimited", "Internal", "Unavailable"}
	// tenantAction: a tenant acts on one thing by id (a POST whose body is read, if only to be empty).
	tenantAction = []string{"BadRequest", "Unauthorized", "NotFound", "BodyTooLarge", "RateLimited", "Internal", "Unavailable"}
	// tenantStream: a long-poll or an event stream, capped as streams are rather than rate limited.
	tenantStream = []string{"BadRequest", "Unauthorized", "NotFound", "EventsLimited", "Internal", "Unavailable"}
	// tenantCreate: a tenant creates a workflow or batch from a JSON body under an Idempotency-Key.
	// Its 409 is the route's own (createdAnswers): a node's order may conflict too.
	tenantCreate = []string{"BadRequest", "Unauthorized", "Forbidden", "BodyTooLarge",
		"UnsupportedMediaType", "IdempotencyKeyReused", "RateLimited", "Internal"}
	// operatorAction: an operator token acts on a schedule.
	operatorAction = []string{"BadRequest", "OperatorUnauthorized", "OperatorForbidden", "NotFound", "BodyTooLarge",
		"RateLimited", "Internal", "Unavailable"}
)

// withProblems is a route's own answers followed by the shared problem answers named by refs.
func withProblems(own []apidoc.Response, refs ...string) []apidoc.Response {
	out := append([]apidoc.Response(nil), own...)
	for _, ref := range refs {
		status, ok := problemStatus[ref]
		if !ok {
			panic("httpapi: no shared problem answer " + ref) // a typo in the routes' table, caught by every test
		}
		out = append(out, apidoc.Response{Status: status, Ref: ref})
	}
	return out
}
