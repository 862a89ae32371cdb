// Package tasks is the contract between jobguard and its task types: Task (protection policy,
// request, handler, read-model routes, commands, settings, SQL schema), the errors the API maps
// (FieldError, NotFound, Conflict), and the identity claim of requests that stand for something
// for ever (Identified). It imports no task type: the examples live in tasks/rebuildcache and
// tasks/reservestock, and tasks/registry lists the ones cmd/jobguard runs. Adding a task type is
// one package that exports a Task and one line in tasks/registry.
package tasks

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/locking"
	"github.com/jobguard/jobguard/middleware"
	"github.com/jobguard/jobguard/schedule"
)

// Deps are what handlers need from the process.
type Deps struct {
	// HTTP is the client for upstream calls (default: 10 s timeout).
	HTTP *http.Client
	// Settings holds the value of every registered task's Settings by name, defaults applied (the
	// app fills it from its configuration).
	Settings map[string]string
	// SQL is the process's PostgreSQL pool when DATABASE_URL is set; nil: everything is in Redis.
	SQL *pgxpool.Pool
}

// Setting is the value of the setting called name ("" when it is not in Settings).
func (d Deps) Setting(name string) string { return d.Settings[name] }

// Task is one task type: its protection policy, the request that enqueues it, its handler, its
// read models and its settings. The API serves POST /jobs/<type> and every route of every task in
// the registry; the configuration reads every task's settings.
type Task struct {
	// Type is the asynq task type.
	Type string
	// Description says what a job of the type does, for the API's description of POST /jobs/<type>.
	Description string
	// Config is how its jobs are protected (job level: enqueued through the API or a guard).
	Config middleware.Job
	// Request returns an empty request body to decode into.
	Request func() Request
	// Handler is a plain asynq handler; under the guard's middleware it finds its run with
	// middleware.RunFrom.
	Handler func(Deps) asynq.Handler
	// Routes are the task's read models, served behind the API's authentication and rate limit.
	Routes []Route
	// Schedules are periodic jobs of this type declared in code (Type may be left empty); a
	// deployment adds its own with SCHEDULES. The app validates them with the configuration.
	Schedules []schedule.Spec
	// Settings are the environment variables the task reads, with the rest of the configuration.
	Settings []Setting
	// Commands are the task's write routes beyond POST /jobs/<type>, e.g. recording an order in
	// SQL and its job in the same transaction; mounted like the read models.
	Commands []Command
	// SQLSchema is the DDL the task's tables need in PostgreSQL (idempotent: CREATE ... IF NOT
	// EXISTS), run at start-up when DATABASE_URL is set; "" when the task keeps nothing in SQL.
	SQLSchema string
	// SQLVersion is SQLSchema's migration version, unique across tasks and above 100 (the
	// core's are below): a change to the schema is a new version, never an edit of an old one.
	SQLVersion int64
	// SQLFenced says the handler writes PostgreSQL under sqlfence at SQLFenceResource(type, the
	// job's resource): a cancel of a running job then raises that fence too, before its answer,
	// so that nothing the cancelled run commits there afterwards lands.
	SQLFenced bool
}

// SQLFenceResource is the sqlfence resource of a task type's jobs on resource: the name a
// SQLFenced task's handler writes under, and the one a cancel raises.
func SQLFenceResource(typ, resource string) string { return typ + ":" + resource }

// Route is a read model of a task: GET <Path> answers a JSON body computed from Redis.
type Route struct {
	// Method is http.MethodGet (HEAD follows it): a route reads, it never writes.
	Method string
	// Path is Fiber-style; each ":name" segment is a parameter, e.g. "/cache/:tenant/:resource".
	// Paths under /jobs, /monitoring, /metrics, /healthz, /readyz, /schedules and /openapi.json are the app's.
	Path string
	// Tenant is the parameter that holds the tenant: with API_TOKENS it must be the token's tenant
	// (403 otherwise), and with the API open it names the rate limit's budget.
	Tenant string
	// Params validates each parameter of Path, in the order of Path, before Read runs: the error
	// is a *FieldError naming it (400). Every parameter has one.
	Params map[string]func(string) error
	// Read answers the request with the body to send as JSON, or an error: NotFound (404), a
	// *FieldError (400), anything else as the API maps it. params are the validated parameters,
	// strings of their own (they outlive the request's buffers).
	Read func(ctx context.Context, r ReadDeps, params map[string]string) (any, error)
	// Summary says in one line what the route answers, for the API's description (/openapi.json).
	Summary string
	// Response is a value of the type Read answers with: the API's description reflects its JSON
	// Schema (json tags, and `openapi` tags for what the type cannot say, see internal/apidoc), so
	// a field added to the read model is in the document. nil: any JSON.
	Response any
}

// Command is a write route of a task: POST <Path> with a JSON body decoded strictly into Accept(),
// validated, and for the token's tenant only (403), then handed to Do.
type Command struct {
	// Path is fixed (no parameters); paths of the app's are refused as for routes.
	Path string
	// Accept returns an empty body to decode into.
	Accept func() Request
	// Do carries the command out; its errors map as a read model's, plus Conflict (409).
	Do func(ctx context.Context, r ReadDeps, req Request) (Answer, error)
	// SQL says Do needs PostgreSQL (ReadDeps.SQL): without DATABASE_URL the route is not mounted,
	// so its path is 404 for every method rather than 405 to all but the one that fails.
	SQL bool
	// Summary says in one line what the command does, for the API's description.
	Summary string
	// Replies are Do's answers other than errors, for the API's description: each status with a
	// value of its Body's type. nil: 200 with any JSON.
	Replies []Reply
}

// Reply describes one answer of a command: its status, what it means and a value of the type of
// its body (see Route.Response).
type Reply struct {
	Status      int
	Description string
	Body        any
}

// QueuedJob is the body of a command's answer that queued a job (or found the one it queued
// before): the job's id, as POST /jobs/<type> answers it.
type QueuedJob struct {
	JobID        string `json:"job_id" openapi:"ref=JobID"`
	Status       string `json:"status" openapi:"const=queued"`
	Deduplicated bool   `json:"deduplicated"`
}

// Answer is a command's answer: status, JSON body and Location ("" none).
type Answer struct {
	Status   int
	Body     any
	Location string
}

// ConflictError is a request that contradicts what exists (409): Field names what.
type ConflictError struct {
	Field, Detail string
}

func (e *ConflictError) Error() string { return "tasks: " + e.Field + ": " + e.Detail }

// Conflict is the answer to a request that contradicts what exists (409 naming field).
func Conflict(field, detail string) error { return &ConflictError{Field: field, Detail: detail} }

func (c Command) check() error {
	if len(c.Path) < 2 || c.Path[0] != '/' || strings.Contains(c.Path, ":") || c.Accept == nil || c.Do == nil {
		return errors.New("a fixed path starting with /, Accept and Do are required")
	}
	return nil
}

// ReadDeps are what read models need from the process.
type ReadDeps struct {
	// Locks is the engine's locking client: the shared Redis (Locks.Redis()) and the key prefix
	// that engine.ResourceKey puts before a task's keys.
	Locks *locking.Client
	// SQL is the process's PostgreSQL pool when DATABASE_URL is set; nil: Redis only.
	SQL *pgxpool.Pool
}

// Setting is an environment variable a task reads. The app reads it with its own variables,
// validates it at start-up (an error names the variable) and hands its value to the task's
// handler through Deps.Setting.
type Setting struct {
	// Name is the variable, e.g. REBUILD_SOURCE_URL: upper-case letters, digits and '_'.
	Name string
	// Default is the value when the variable is unset or empty.
	Default string
	// Help says what the variable does, in one line.
	Help string
	// Validate checks a value, the default included; nil accepts any. Its error never repeats a
	// secret the value may hold (see internal/redact).
	Validate func(string) error
}

// ErrNotFound: a read model has nothing under its path's ids; the API answers 404 with the
// error's text (see NotFound).
var ErrNotFound = errors.New("tasks: not found")

// NotFound is an ErrNotFound whose text, shown to the caller, says what is missing.
func NotFound(detail string) error { return &notFoundError{detail: detail} }

type notFoundError struct{ detail string }

func (e *notFoundError) Error() string        { return e.detail }
func (e *notFoundError) Is(target error) bool { return target == ErrNotFound }

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

// Protect protects every task type of list with guard (job level) and returns a mux that serves
// their handlers under the guard's middleware, as any asynq application mounts it. A setting of
// list that deps.Settings lacks gets its default.
func Protect(guard *middleware.Guard, deps Deps, list []Task) *asynq.ServeMux {
	if deps.HTTP == nil {
		deps.HTTP = &http.Client{Timeout: 10 * time.Second}
	}
	settings := make(map[string]string, len(deps.Settings))
	for k, v := range deps.Settings {
		settings[k] = v
	}
	for _, t := range list {
		for _, st := range t.Settings {
			if _, ok := settings[st.Name]; !ok {
				settings[st.Name] = st.Default
			}
		}
	}
	deps.Settings = settings
	mux := asynq.NewServeMux()
	mux.Use(guard.Middleware())
	for _, t := range list {
		guard.ProtectJob(t.Type, t.Config)
		mux.Handle(t.Type, t.Handler(deps))
	}
	return mux
}

// ByTenant is a middleware.Limit key that counts a task's jobs per tenant, as both examples do.
func ByTenant(o middleware.EnqueueOptions) string { return o.Tenant }

// Check reports the first mistake in a task list: a type that is empty or listed twice, a task
// without its request or handler, a route that is not a GET, whose tenant or parameters lack a
// validation or that another task serves too, a setting badly named or declared twice.
func Check(list []Task) error {
	types, routes, settings := map[string]bool{}, map[string]string{}, map[string]string{}
	versions := map[int64]string{}
	for _, t := range list {
		typ := t.Type
		if typ == "" || types[typ] {
			return fmt.Errorf("tasks: type %q is empty or listed twice", typ)
		}
		types[typ] = true
		if t.Request == nil || t.Handler == nil {
			return fmt.Errorf("tasks: %s: Request and Handler are required", typ)
		}
		for _, r := range t.Routes {
			if err := r.check(); err != nil {
				return fmt.Errorf("tasks: %s: route %s %s: %w", typ, r.Method, r.Path, err)
			}
			if other, dup := routes[r.Method+" "+r.Path]; dup {
				return fmt.Errorf("tasks: %s: route %s %s is %s's too", typ, r.Method, r.Path, other)
			}
			routes[r.Method+" "+r.Path] = typ
		}
		if t.SQLSchema != "" {
			if t.SQLVersion <= 100 || versions[t.SQLVersion] != "" {
				return fmt.Errorf("tasks: %s: SQLVersion %d must be above 100 and unique", typ, t.SQLVersion)
			}
			versions[t.SQLVersion] = typ
		}
		for _, c := range t.Commands {
			if err := c.check(); err != nil {
				return fmt.Errorf("tasks: %s: command POST %s: %w", typ, c.Path, err)
			}
			if other, dup := routes["POST "+c.Path]; dup {
				return fmt.Errorf("tasks: %s: route POST %s is %s's too", typ, c.Path, other)
			}
			routes["POST "+c.Path] = typ
		}
		for _, s := range t.Settings {
			if !settingRe.MatchString(s.Name) {
				return fmt.Errorf("tasks: %s: setting %q is not an environment variable name (A-Z, 0-9, _)", typ, s.Name)
			}
			if other, dup := settings[s.Name]; dup {
				return fmt.Errorf("tasks: %s: setting %s is %s's too", typ, s.Name, other)
			}
			settings[s.Name] = typ
		}
	}
	return nil
}

var (
	settingRe = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
	paramRe   = regexp.MustCompile(`:([A-Za-z0-9_]+)`)
)

// ParamNames lists the parameters of the route's Path, in order.
func (r Route) ParamNames() []string {
	var names []string
	for _, m := range paramRe.FindAllStringSubmatch(r.Path, -1) {
		names = append(names, m[1])
	}
	return names
}

func (r Route) check() error {
	if r.Method != http.MethodGet {
		return errors.New("the method must be GET: a route serves a read model")
	}
	if len(r.Path) < 2 || r.Path[0] != '/' || r.Read == nil {
		return errors.New("a path starting with / and Read are required")
	}
	names := r.ParamNames()
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] || r.Params[n] == nil {
			return fmt.Errorf("parameter %q is repeated or has no validation in Params", n)
		}
		seen[n] = true
	}
	if len(r.Params) != len(seen) {
		return errors.New("a parameter in Params is not in the path")
	}
	if !seen[r.Tenant] {
		return fmt.Errorf("the tenant parameter %q is not in the path: a read model is always a tenant's", r.Tenant)
	}
	return nil
}

// FieldError names the payload field that failed validation.
type FieldError struct {
	Field  string
	Detail string
}

func (e *FieldError) Error() string { return "tasks: " + e.Field + ": " + e.Detail }

var idRe = regexp.MustCompile(IDPattern)

// IDPattern is the regular expression an id field of a request matches (CheckID): the API's
// description gives it to every field tagged `openapi:"ref=ID"`.
const IDPattern = `^[A-Za-z0-9._-]{1,128}$`

// CheckID validates an id field as every request's ids are: 1-128 characters of [A-Za-z0-9._-]
// (a *FieldError naming field otherwise).
func CheckID(field, v string) error {
	if !idRe.MatchString(v) {
		return &FieldError{Field: field, Detail: fmt.Sprintf("must be 1-128 characters of [A-Za-z0-9._-], got %d characters", len(v))}
	}
	return nil
}

// IDParam validates the route parameter called name as an id (see CheckID), for Route.Params.
func IDParam(name string) func(string) error {
	return func(v string) error { return CheckID(name, v) }
}
