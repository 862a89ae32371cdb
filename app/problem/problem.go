// Package problem is how every HTTP error of jobguard is answered: problem+json (RFC 9457) with a
// stable code per error kind (Kinds, the README's table), HTTPError for handlers to return, and
// ErrorHandler mapping every error (the task contract's, the engine's, web's, Redis down) to its
// answer. It may import the library, the task contract and web; nothing of app.
package problem

import (
	"errors"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/tasks"
	"github.com/jobguard/jobguard/web"
)

// Details is an RFC 9457 problem details object, the body of every error answer.
type Details struct {
	// Type is TypeBase + Code: it identifies the kind (it need not resolve).
	Type string `json:"type" openapi:"ref=ProblemType"`
	// Code is the kind's stable snake_case code (codes.go, the README's error table).
	Code     string `json:"code" openapi:"ref=ProblemCode"`
	Title    string `json:"title"`
	Status   int    `json:"status" openapi:"min=400,max=599"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
	// Field names the request field or header that failed validation.
	Field string `json:"field,omitempty"`
	// RequestID matches the X-Request-ID header and the access log line.
	RequestID string `json:"request_id,omitempty"`
}

// ContentType is the media type of error answers.
const ContentType = "application/problem+json"

// HTTPError is an error with the status and detail the API answers with. Handlers return it (or
// wrap it); ErrorHandler is the one place that turns errors into HTTP answers.
type HTTPError struct {
	Status int
	// Code is the error kind (codes.go); empty means the one CodeForStatus gives Status.
	Code   string
	Detail string
	Field  string
	Err    error
}

func (e *HTTPError) Error() string {
	if e.Err != nil {
		return e.Detail + ": " + e.Err.Error()
	}
	return e.Detail
}

func (e *HTTPError) Unwrap() error { return e.Err }

// BadField is the answer to a request whose field (or header) is invalid.
func BadField(field, detail string) *HTTPError {
	return &HTTPError{Status: http.StatusBadRequest, Field: field, Detail: detail}
}

// ErrorHandler maps every error a handler returns to a problem+json answer (in text to a request
// web marked with PlainErrors). Unknown errors are 500s whose detail never leaks internals; they
// are logged with the request id.
func ErrorHandler(log zerolog.Logger) fiber.ErrorHandler {
	return func(c *fiber.Ctx, err error) error {
		path := EchoPath(c.Path())
		p := Details{Instance: path, RequestID: RequestID(c)}
		var he *HTTPError
		var fe *fiber.Error
		var field *tasks.FieldError
		var conflict *tasks.ConflictError
		switch {
		case errors.As(err, &he):
			p.Status, p.Detail, p.Field, p.Code = he.Status, he.Detail, he.Field, he.Code
		case errors.As(err, &conflict):
			p.Status, p.Detail, p.Field, p.Code = http.StatusConflict, conflict.Detail, conflict.Field, CodeOrderConflict
		case errors.As(err, &field):
			p.Status, p.Detail, p.Field = http.StatusBadRequest, field.Field+" "+field.Detail, field.Field
		case errors.Is(err, tasks.ErrNotFound):
			p.Status, p.Detail = http.StatusNotFound, err.Error() // a read model's own text
		case errors.Is(err, engine.ErrJobNotFound):
			p.Status, p.Detail = http.StatusNotFound, "no such job"
		case errors.Is(err, engine.ErrNotFailed):
			p.Status, p.Detail, p.Code = http.StatusConflict, "only a failed job can be retried ("+Reason(err, engine.ErrNotFailed)+")", CodeJobNotFailed
		case errors.Is(err, engine.ErrEnded):
			p.Status, p.Detail, p.Code = http.StatusConflict, "the job has ended ("+Reason(err, engine.ErrEnded)+"); only a queued, scheduled, retrying or running job can be cancelled", CodeJobEnded
		case errors.Is(err, engine.ErrNotBlocked):
			p.Status, p.Detail, p.Code = http.StatusConflict, "the job does not block its sequence (it has not failed, or its key has gone on)", CodeJobNotBlocking
		case errors.Is(err, engine.ErrUnrunnable):
			p.Status, p.Detail = http.StatusGone, err.Error()
		case errors.As(err, &fe):
			p.Status, p.Detail, p.Code = fe.Code, fe.Message, webCodes[fe]
		case dependencyDown(err):
			p.Status, p.Detail = http.StatusServiceUnavailable, unavailableDetail
		default:
			p.Status, p.Detail = http.StatusInternalServerError, "internal error; see the server log for request "+p.RequestID
		}
		switch {
		case p.Status == http.StatusInternalServerError:
			log.Error().Err(err).Str("request_id", p.RequestID).Str("path", path).Msg("request failed")
		case p.Status >= 500:
			// A dependency that did not answer, or a method no server knows: not jobguard's fault.
			log.Warn().Err(err).Str("request_id", p.RequestID).Str("path", path).Int("status", p.Status).Msg("request failed")
		}
		p.Detail = echo(p.Detail, maxDetail)
		setRetryAfter(c, p.Status)
		p.Title = http.StatusText(p.Status)
		if p.Code == "" {
			p.Code = CodeForStatus[p.Status]
		}
		if p.Code == "" {
			p.Code = CodeHTTPError
		}
		p.Type = TypeBase + p.Code
		c.Status(p.Status)
		if plain, _ := c.Locals(web.PlainErrors).(bool); plain {
			// asynqmon's page renders an error's body as text (web/ui_errors.go).
			c.Set(fiber.HeaderContentType, fiber.MIMETextPlainCharsetUTF8)
			return c.SendString(plainText(p))
		}
		c.Set(fiber.HeaderContentType, ContentType)
		return c.JSON(p, ContentType)
	}
}

// plainText is p in text, for a client that renders an error's body as it comes: the detail,
// and the request id where the detail does not name it.
func plainText(p Details) string {
	if p.RequestID == "" || strings.Contains(p.Detail, p.RequestID) {
		return p.Detail
	}
	return p.Detail + " (request " + p.RequestID + ")"
}

// Reason is what err adds to sentinel, the engine's error it wraps ("it is done" of "engine: job
// has ended: it is done"): the answer says it without the engine's own words.
func Reason(err, sentinel error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, sentinel.Error()+": "); i >= 0 {
		return msg[i+len(sentinel.Error())+2:]
	}
	return strings.TrimPrefix(sentinel.Error(), "engine: ")
}

// webCodes names the kinds of web's errors (fiber.Errors, compared by identity: web knows no app).
var webCodes = map[*fiber.Error]string{
	web.ErrCrossOrigin:    CodeCrossOrigin,
	web.ErrBackendTimeout: CodeMonitoringTimeout,
	web.ErrChangeUnknown:  CodeMonitoringChange,
	web.ErrBackendDown:    CodeMonitoringUnavailable,
	web.ErrBackendFailed:  CodeMonitoringFailed,
}

func RequestID(c *fiber.Ctx) string {
	if id, ok := c.Locals("requestid").(string); ok {
		return id
	}
	return ""
}
