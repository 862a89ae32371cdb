// Package tasks holds jobguard's task types, one file each: type constant, payload with
// validation, the job spec it is enqueued with, and its handler. Adding a task type is one new
// file and one line in registry.
package tasks

import (
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/jobguard/jobguard/engine"
)

// Deps are what handlers need from the process.
type Deps struct {
	// SourceURL is where rebuild-cache fetches its source (REBUILD_SOURCE_URL); empty: computed locally.
	SourceURL string
	// HTTP is the client for upstream calls (default: 10 s timeout).
	HTTP *http.Client
}

// Task is one task type: its protection policy, the request that enqueues it, and its handler.
// The API serves POST /jobs/<type> for every task in the registry.
type Task struct {
	Config engine.TaskConfig
	// Request returns an empty request body to decode into.
	Request func() Request
	Handler func(Deps) engine.Handler
}

// Request is the body of POST /jobs/<type>: validated, it names its tenant and becomes a job.
type Request interface {
	// Validate names the first invalid field (*FieldError).
	Validate() error
	// Tenant is the tenant the request is for.
	Tenant() string
	// Spec is the job the request is enqueued as, with its dedup policy.
	Spec() engine.Spec
}

// Identified is implemented by requests whose identity outlives any job: an order id names one
// order, for ever. The API claims the identity before it enqueues (a request with the same
// identity and other content is a 409), and the task's handler checks the claim before its effect
// (ClaimIdentity, CheckIdentity), so that jobs created around the API cannot apply it twice either.
type Identified interface {
	Identity() Identity
}

// Lookup returns the registered task of a type.
func Lookup(typ string) (Task, bool) {
	for _, t := range registry {
		if t.Config.Type == typ {
			return t, true
		}
	}
	return Task{}, false
}

// registry lists every task type; one line per type.
var registry = []Task{
	rebuildCache,
	reserveStock,
}

// All returns the registered task types.
func All() []Task { return append([]Task(nil), registry...) }

// Register adds every registered task type's handler to the stack.
func Register(s *engine.Stack, deps Deps) { RegisterTasks(s, deps, registry) }

// RegisterTasks adds the handlers of list to the stack.
func RegisterTasks(s *engine.Stack, deps Deps, list []Task) {
	if deps.HTTP == nil {
		deps.HTTP = &http.Client{Timeout: 10 * time.Second}
	}
	for _, t := range list {
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
