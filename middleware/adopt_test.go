package middleware_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobguard/jobguard/internal/testsupport"
)

// A separate module, a plain asynq application (testdata/adopt/before), adds jobguard (this
// repository, through a go.work) without touching its producers, handlers or retry policy
// (testdata/adopt/after): it builds, and the change is at most a dozen lines. The documentation's
// snippets are built the same way by docs/snippets_test.go.
func TestASeparateModuleAdoptsTheGuard(t *testing.T) {
	t.Parallel()
	root, _ := filepath.Abs("..")
	before, _ := os.ReadFile("testdata/adopt/before/main.go")
	after, _ := os.ReadFile("testdata/adopt/after/main.go")
	if changed := changedLines(string(before), string(after)); changed > 12 {
		t.Fatalf("adding jobguard changed %d lines, want at most 12", changed)
	}
	for name, src := range map[string]string{"before": string(before), "after": string(after)} {
		dir := testsupport.NewModule(t, root, "example.com/app")
		testsupport.WriteFile(t, filepath.Join(dir, "main.go"), src)
		if out, err := testsupport.GoIn(dir, "build", "-o", os.DevNull, "."); err != nil {
			t.Fatalf("%s: go build: %v\n%s", name, err, out)
		}
	}
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
