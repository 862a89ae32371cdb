// Package tasks holds jobguard's task types, one file each: type constant, payload with
// validation, the job spec it is enqueued with, and its handler. Adding a task type is one new
// file and one line in registry.
package tasks

import (
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/jobguard/jobguard/middleware"
)

// Deps are what handlers need from the process.
type Deps struct {
	// SourceURL is where rebuild-cache fetches its source (REBUILD_SOURCE_URL); empty: computed locally.
	SourceURL string
	// HTTP is the client for upstream calls (default: 10 s timeout).
	HTTP *http.Client
}

// Task is one task type: its protection policy and its handler.
type Task struct {
	Config  middleware.TaskConfig
	Handler func(Deps) middleware.Handler
}

// registry lists every task type; one line per type.
var registry = []Task{
	rebuildCache,
	reserveStock,
}

// All returns the registered task types.
func All() []Task { return append([]Task(nil), registry...) }

// Register adds every task type's handler to the stack.
func Register(s *middleware.Stack, deps Deps) {
	if deps.HTTP == nil {
		deps.HTTP = &http.Client{Timeout: 10 * time.Second}
	}
	for _, t := range registry {
		s.Register(t.Config, t.Handler(deps))
	}
}

// FieldError names the payload field that failed validation.
type FieldError struct {
	Field  string
	Detail string
}

func (e *FieldError) Error() string { return "tasks: " + e.Field + ": " + e.Detail }

var idRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// checkID validates an id field: 1-128 characters of [A-Za-z0-9._-].
func checkID(field, v string) error {
	if !idRe.MatchString(v) {
		return &FieldError{Field: field, Detail: fmt.Sprintf("must be 1-128 characters of [A-Za-z0-9._-], got %d characters", len(v))}
	}
	return nil
}
