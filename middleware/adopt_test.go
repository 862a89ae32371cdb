package middleware_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A separate module, a plain asynq application (testdata/adopt/before), adds jobguard through a
// replace directive to this repository without touching its producers, handlers or retry policy
// (testdata/adopt/after): it builds, and the change is at most a dozen lines.
func TestASeparateModuleAdoptsTheGuard(t *testing.T) {
	t.Parallel()
	root, _ := filepath.Abs("..")
	before, _ := os.ReadFile("testdata/adopt/before/main.go")
	after, _ := os.ReadFile("testdata/adopt/after/main.go")
	if changed := changedLines(string(before), string(after)); changed > 12 {
		t.Fatalf("adding jobguard changed %d lines, want at most 12", changed)
	}
	for name, src := range map[string]string{"before": string(before), "after": string(after)} {
		if out, err := buildModule(t, root, src); err != nil {
			t.Fatalf("%s: go build: %v\n%s", name, err, out)
		}
	}
}

// buildModule builds src as the main package of a module of its own that requires this
// repository through a replace directive, as a separate application would.
func buildModule(t *testing.T, root, src string) ([]byte, error) {
	t.Helper()
	goVersion := ""
	for _, line := range strings.Split(mustRead(t, filepath.Join(root, "go.mod")), "\n") {
		if strings.HasPrefix(line, "go ") {
			goVersion = line
		}
	}
	dir := t.TempDir()
	write(t, filepath.Join(dir, "go.mod"), "module example.com/app\n\n"+goVersion+"\n\nrequire github.com/jobguard/jobguard v0.0.0\n\nreplace github.com/jobguard/jobguard => "+root+"\n")
	write(t, filepath.Join(dir, "go.sum"), mustRead(t, filepath.Join(root, "go.sum")))
	write(t, filepath.Join(dir, "main.go"), src)
	cmd := exec.Command("go", "build", "-mod=mod", "-o", os.DevNull, ".")
	cmd.Dir = dir
	return cmd.CombinedOutput()
}

// changedLines counts the lines of b that a does not have, and of a that b does not have.
func changedLines(a, b string) int {
	count := func(x, y string) int {
		seen := map[string]int{}
		for _, l := range strings.Split(y, "\n") {
			seen[l]++
		}
		n := 0
		for _, l := range strings.Split(x, "\n") {
			if seen[l] > 0 {
				seen[l]--
			} else {
				n++
			}
		}
		return n
	}
	return max(count(a, b), count(b, a))
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The README's "On your own asynq server" snippet compiles, inside a function that declares what
// it takes from the application around it.
func TestTheREADMESnippetCompiles(t *testing.T) {
	t.Parallel()
	root, _ := filepath.Abs("..")
	snippet := docSnippet(t, root, "README.md", "## On your own asynq server")
	src := `package main

import (
	"context"
	"errors"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/middleware"
)

var reserve = middleware.NewEffect("return 1")

func main() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{})
	mux := asynq.NewServeMux()
	yourAsynqConfig := asynq.Config{}
` + snippet + `	_ = srv
}
`
	if out, err := buildModule(t, root, src); err != nil {
		t.Fatalf("the README's snippet does not compile: %v\n%s\n%s", err, out, src)
	}
}

// docSnippet is the first Go block after heading in the Markdown file at path (from the root).
func docSnippet(t *testing.T, root, path, heading string) string {
	t.Helper()
	doc := mustRead(t, filepath.Join(root, path))
	i := strings.Index(doc, heading)
	if i < 0 {
		t.Fatalf("%s has no %q", path, heading)
	}
	section := doc[i:]
	start := strings.Index(section, "```go\n") + len("```go\n")
	return section[start : start+strings.Index(section[start:], "```")]
}

// docs/POSTGRES.md's sqlfence snippet compiles in a handler, as a user would paste it.
func TestThePostgresDocSnippetCompiles(t *testing.T) {
	t.Parallel()
	root, _ := filepath.Abs("..")
	snippet := docSnippet(t, root, "docs/POSTGRES.md", "## sqlfence/: the fence in your SQL")
	src := `package main

import (
	"context"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/middleware"
	"github.com/jobguard/jobguard/sqlfence"
)

var pool *pgxpool.Pool

func handle(ctx context.Context, t *asynq.Task) error {
	run, _ := middleware.RunFrom(ctx)
	sku, qty := string(t.Payload()), 1
` + snippet + `	return err
}

func main() { _ = handle }
`
	if out, err := buildModule(t, root, src); err != nil {
		t.Fatalf("docs/POSTGRES.md's snippet does not compile: %v\n%s\n%s", err, out, src)
	}
}
