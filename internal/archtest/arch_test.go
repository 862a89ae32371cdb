// Package archtest holds the test that keeps the project's dependency direction:
// cmd -> (app, tasks/registry); tasks/registry -> the example tasks (tasks/rebuildcache,
// tasks/reservestock) -> tasks, and nothing else imports an example;
// app -> its rooms, each imported by app alone and never importing app:
// app -> app/httpapi -> (app/admin, app/config, app/problem, app/auth, app/strictjson), never back up;
// (app/store, app/observe) -> app/config -> app/strictjson; app/admin -> (app/problem, app/auth);
// app/problem and app/auth import no room; no package outside cmd imports cmd;
// app and its rooms -> (web, tasks, schedule, middleware); tasks -> (schedule, middleware);
// middleware -> internal/engine -> locking; locking -> go-redis only.
package archtest

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/jobguard/jobguard/"

// importsOf reads the imports of the project's packages from their directories, once each:
// build.Import would ask the go command to resolve every path (a go list per call, most of a
// minute for the whole walk).
type importsOf struct {
	root   string
	byPath map[string][]string
}

func (c *importsOf) of(t *testing.T, path string) []string {
	if imps, ok := c.byPath[path]; ok {
		return imps
	}
	p, err := build.ImportDir(filepath.Join(c.root, filepath.FromSlash(strings.TrimPrefix(path, module))), 0)
	if err != nil {
		t.Fatalf("import %s: %v", path, err)
	}
	c.byPath[path] = p.Imports
	return p.Imports
}

// deps is every package pkg imports, directly or not, that is not in the standard library.
func deps(t *testing.T, c *importsOf, pkg string) []string {
	seen := map[string]bool{}
	var walk func(path string)
	walk = func(path string) {
		for _, imp := range c.of(t, path) {
			if seen[imp] || !strings.Contains(strings.Split(imp, "/")[0], ".") {
				continue // done, or the standard library
			}
			seen[imp] = true
			if strings.HasPrefix(imp, module) {
				walk(imp)
			}
		}
	}
	walk(module + pkg)
	var out []string
	for d := range seen {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

func TestDependencyDirection(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..") // go test runs in the package's directory
	imports := &importsOf{root: root, byPath: map[string][]string{}}
	for _, c := range []struct {
		pkg string
		// allowed reports whether pkg may depend on d.
		allowed func(d string) bool
	}{
		{"locking", func(d string) bool {
			return strings.HasPrefix(d, "github.com/redis/go-redis/") || strings.HasPrefix(d, "github.com/cespare/") ||
				strings.HasPrefix(d, "github.com/dgryski/") || strings.HasPrefix(d, "go.uber.org/atomic")
		}},
		{"sqlfence", func(d string) bool {
			return strings.HasPrefix(d, "github.com/jackc/") || strings.HasPrefix(d, "golang.org/x/")
		}},
		{"outbox", notProject("app", "web", "tasks", "cmd", "schedule", "history")},
		{"history", notProject("app", "web", "tasks", "cmd", "schedule", "outbox")},
		{"middleware", func(d string) bool {
			return notProject("app", "web", "tasks", "cmd", "schedule", "history", "outbox")(d) && !strings.HasPrefix(d, "github.com/gofiber/")
		}},
		{"internal/engine", notProject("app", "web", "tasks", "cmd", "schedule")},
		{"internal/engine/jobstore", notProject("app", "web", "tasks", "cmd", "internal/engine/", "schedule")},
		{"schedule", notProject("app", "web", "tasks", "cmd")},
		// The task contract knows no task type; an example knows the contract, not its siblings
		// nor the list; only cmd (and tests) import the list.
		{"tasks", notProject("app", "web", "cmd", "tasks/rebuildcache", "tasks/reservestock", "tasks/registry")},
		{"tasks/rebuildcache", notProject("app", "web", "cmd", "tasks/reservestock", "tasks/registry")},
		{"tasks/reservestock", notProject("app", "web", "cmd", "tasks/rebuildcache", "tasks/registry")},
		{"tasks/registry", notProject("app", "web", "cmd")},
		{"web", notProject("app", "tasks", "internal/engine", "cmd")},
		// app's rooms: app wires them; none imports app or a room above it.
		{"app/strictjson", onlyProject()},
		{"app/config", onlyProject("internal/", "middleware", "locking", "schedule", "tasks", "app/strictjson")},
		{"app/store", onlyProject("internal/", "middleware", "locking", "schedule", "tasks", "history", "outbox", "sqlfence", "app/config", "app/strictjson")},
		{"app/auth", onlyProject()},
		{"app/admin", onlyProject("internal/", "middleware", "locking", "schedule", "tasks", "web", "app/auth", "app/problem")},
		{"app/problem", onlyProject("internal/", "middleware", "locking", "schedule", "tasks", "web")},
		{"app/observe", onlyProject("internal/", "middleware", "locking", "schedule", "tasks", "app/config", "app/strictjson")},
		// The HTTP API: app wires it into a process; it knows no role, no process and no other room
		// that imports it.
		{"app/httpapi", onlyProject("internal/", "middleware", "locking", "schedule", "tasks", "web", "history", "sqlfence",
			"app/admin", "app/auth", "app/config", "app/problem", "app/strictjson")},
		{"app", notProject("cmd", "tasks/rebuildcache", "tasks/reservestock", "tasks/registry")},
		// The operator CLI is a client of the HTTP API: the JSON is its contract, not the API's
		// package or the engine. It may print text safely and keep URLs' secrets out of errors.
		{"app/cli", onlyProject("internal/freetext", "internal/redact")},
	} {
		for _, d := range deps(t, imports, c.pkg) {
			if !c.allowed(d) {
				t.Errorf("%s depends on %s", c.pkg, d)
			}
		}
	}
}

// onlyProject allows every dependency outside the project and, of the project's packages, only the
// named ones (and what is under them; a name ending in / allows what is under it only).
func onlyProject(pkgs ...string) func(string) bool {
	return func(d string) bool {
		if !strings.HasPrefix(d, module) {
			return true
		}
		for _, p := range pkgs {
			if strings.HasSuffix(p, "/") && strings.HasPrefix(d, module+p) {
				return true
			}
			if d == module+p || strings.HasPrefix(d, module+p+"/") {
				return true
			}
		}
		return false
	}
}

// notProject allows every dependency but the named project packages (and what is under them).
func notProject(pkgs ...string) func(string) bool {
	return func(d string) bool {
		for _, p := range pkgs {
			if d == module+p || strings.HasPrefix(d, module+p+"/") {
				return false
			}
		}
		return true
	}
}

// eachPackage calls check with every package directory of the module (its path relative to the
// module root and what go/build reads of it), skipping hidden directories, testdata and node_modules.
func eachPackage(t *testing.T, check func(rel, dir string, p *build.Package)) {
	root := filepath.Join("..", "..") // go test runs in the package's directory
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if name := d.Name(); rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		if p, err := build.ImportDir(path, 0); err == nil { // else no Go files here
			check(filepath.ToSlash(rel), path, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Nothing imports cmd: a binary wires the project, the project never reaches into a binary. Direct
// imports suffice: a package that imported cmd indirectly would import, directly, one that does.
func TestNothingImportsCmd(t *testing.T) {
	t.Parallel()
	eachPackage(t, func(rel, _ string, p *build.Package) {
		if rel == "cmd" || strings.HasPrefix(rel, "cmd/") {
			return
		}
		for _, imp := range slices.Concat(p.Imports, p.TestImports, p.XTestImports) {
			if imp == module+"cmd" || strings.HasPrefix(imp, module+"cmd/") {
				t.Errorf("%s imports %s", rel, imp)
			}
		}
	})
}

// A package whose tests start servers through pgtest or redistest stops them through redistest.Main:
// without a TestMain that calls it, the servers' temporary directories (a PostgreSQL data
// directory is 55 MB) outlive every run of the package's tests and fill the disk.
func TestServerTestsStopTheirServers(t *testing.T) {
	t.Parallel()
	eachPackage(t, func(rel, dir string, p *build.Package) {
		if !slices.ContainsFunc(slices.Concat(p.TestImports, p.XTestImports), startsServers) {
			return
		}
		if !callsRedistestMain(t, dir, slices.Concat(p.TestGoFiles, p.XTestGoFiles)) {
			t.Errorf("%s: its tests start servers but no TestMain calls redistest.Main to stop them", rel)
		}
	})
}

// startsServers says whether a test importing pkg starts servers: the two packages that start them
// and the helpers built on them.
func startsServers(pkg string) bool {
	switch strings.TrimPrefix(pkg, module) {
	case "internal/pgtest", "internal/redistest", "tasks/internal/tasktest":
		return true
	}
	return false
}

func callsRedistestMain(t *testing.T, dir string, files []string) bool {
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if src := string(b); strings.Contains(src, "func TestMain(") && strings.Contains(src, "redistest.Main(") {
			return true
		}
	}
	return false
}
