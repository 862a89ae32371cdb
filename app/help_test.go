package app

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/guardstack"
	"github.com/jobguard/jobguard/tasks"
	"github.com/jobguard/jobguard/tasks/registry"
)

var updateEnvExample = flag.Bool("update-env-example", false, "rewrite ../.env.example from app.Variables")

// Variables is the list FromLookup reads, no more and no less: a variable added to FromLookup
// without a row (or a row without a reader) fails here.
func TestVariablesAreWhatFromLookupReads(t *testing.T) {
	t.Parallel()
	var asked []string
	_, _ = config.FromLookup(func(name string) (string, bool) { asked = append(asked, name); return "", false }, nil)
	var listed []string
	for _, v := range config.Variables {
		if v.Reader == "" {
			listed = append(listed, v.Name)
		}
	}
	if !slices.Equal(asked, listed) {
		t.Fatalf("FromLookup reads %v;\napp.Variables lists %v\n(add a row to config.Variables in app/config/config.go, in the order FromLookup reads it)", asked, listed)
	}
}

// Every default the table prints is the default the configuration has.
func TestVariablesDefaultsAreTheConfigDefaults(t *testing.T) {
	t.Parallel()
	env := map[string]string{}
	for _, v := range config.Variables {
		if v.Reader == "" && v.Default != "" {
			env[v.Name] = v.Default
		}
	}
	got, err := config.FromLookup(lookupFrom(env), registry.All())
	if err != nil {
		t.Fatal(err)
	}
	want, err := config.FromLookup(lookupFrom(nil), registry.All())
	if err != nil {
		t.Fatal(err)
	}
	got.Tasks, want.Tasks = nil, nil // funcs: compared by the lists' own tests
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the table's defaults give\n%+v\nnot the defaults\n%+v", got, want)
	}
}

func TestHelpListsRolesSubcommandsAndEveryVariable(t *testing.T) {
	t.Parallel()
	var first string
	for _, arg := range []string{"help", "-h", "--help"} {
		code, out, _ := runMain(t, nil, arg)
		if code != 0 {
			t.Fatalf("%s: exit %d", arg, code)
		}
		if first == "" {
			first = out
		} else if out != first {
			t.Fatalf("%s prints another text than help", arg)
		}
	}
	for _, want := range []string{"jobguard api", "jobguard worker", "jobguard healthcheck", "jobguard version"} {
		if !strings.Contains(first, want) {
			t.Errorf("help lacks %q", want)
		}
	}
	lines := strings.Split(first, "\n")
	row := func(name string) string {
		for _, l := range lines {
			if f := strings.Fields(l); len(f) > 0 && f[0] == name {
				return l
			}
		}
		return ""
	}
	for _, v := range config.Variables {
		l := row(v.Name)
		if l == "" || (v.Default != "" && !strings.Contains(l, " "+v.Default+" ")) {
			t.Errorf("help's row of %s is %q, want its default %q", v.Name, l, v.Default)
		}
	}
	for _, task := range registry.All() {
		for _, s := range task.Settings {
			if row(s.Name) == "" {
				t.Errorf("help lacks the setting %s of task %s", s.Name, task.Type)
			}
		}
	}
}

// MainWith runs a program's own task list: help lists its tasks' settings, and the configuration
// of a role and of jobguard jobs reencrypt knows its types (TASK_LIMITS may name them), where Main
// knows the registry's only.
func TestMainWithRunsItsTaskList(t *testing.T) {
	t.Parallel()
	own := greet
	own.Settings = []tasks.Setting{{Name: "GREETING", Default: "hello", Help: "what greet says"}}
	list := append(registry.All(), own)
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"help"}, lookupFrom(nil), &out, &errOut, list); code != 0 || !strings.Contains(out.String(), "[task greet]") {
		t.Fatalf("help: exit %d, greet's setting not listed:\n%s", code, out.String())
	}
	env := lookupFrom(map[string]string{"TASK_LIMITS": "greet=concurrency:x"})
	for _, args := range [][]string{{"worker"}, {"jobs", "reencrypt"}} {
		out.Reset()
		errOut.Reset()
		if code := Main(context.Background(), args, env, &out, &errOut, list); code != 2 || !strings.Contains(errOut.String(), `greet: concurrency "x"`) {
			t.Errorf("MainWith %v: exit %d, %q: the configuration did not see greet", args, code, errOut.String())
		}
		errOut.Reset()
		if code := Main(context.Background(), args, env, &out, &errOut, registry.All()); code != 2 || !strings.Contains(errOut.String(), "does not name a task type") {
			t.Errorf("Main %v: exit %d, %q: greet is not the registry's", args, code, errOut.String())
		}
	}
}

// .env.example is writeEnvExample's output; go test ./app -run TestEnvExampleIsCurrent
// -update-env-example rewrites it.
func TestEnvExampleIsCurrent(t *testing.T) {
	t.Parallel()
	var want bytes.Buffer
	writeEnvExample(&want, registry.All())
	if *updateEnvExample {
		if err := os.WriteFile("../.env.example", want.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile("../.env.example")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatal(".env.example is not what app.Variables says: go test ./app -run TestEnvExampleIsCurrent -update-env-example")
	}
	for _, v := range config.Variables {
		if !bytes.Contains(got, []byte("\n#"+v.Name+"="+v.Default+"\n")) {
			t.Errorf(".env.example lacks %s=%s", v.Name, v.Default)
		}
	}
}

// greet is a third task type, written as a file in tasks/ would be (a copy of httpapi's test task:
// Main is app's, the routes that run it are httpapi's).
type greetRequest struct {
	TenantID string `json:"tenant_id"`
	Name     string `json:"name"`
}

func (g *greetRequest) Validate() error {
	if g.TenantID == "" {
		return &tasks.FieldError{Field: "tenant_id", Detail: "is required"}
	}
	if g.Name == "" {
		return &tasks.FieldError{Field: "name", Detail: "is required"}
	}
	return nil
}
func (g *greetRequest) Tenant() string { return g.TenantID }
func (g *greetRequest) Spec() engine.Spec {
	b, _ := json.Marshal(g)
	return engine.Spec{Type: "greet", Tenant: g.TenantID, Resource: g.TenantID + ":" + g.Name, Payload: b}
}

var greet = tasks.Task{
	Type:    "greet",
	Request: func() tasks.Request { return &greetRequest{} },
	Handler: guardstack.EngineHandlerOf(func(tasks.Deps) engine.Handler {
		return func(ctx context.Context, j *engine.Job) error {
			var g greetRequest
			_ = json.Unmarshal(j.Payload, &g)
			j.SetResult("hello " + g.Name)
			return nil
		}
	}),
}
