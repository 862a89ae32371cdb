package testsupport

import (
	"context"
	"embed"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// ScriptsLoad checks every scripts/*.lua of fsys: it opens with its KEYS/ARGV/returns header,
// compiles alone in the real Redis behind rdb, and loads as it runs (asRun, one entry a file: a
// script missing from asRun, or an entry without its file, fails the test).
func ScriptsLoad(t *testing.T, rdb redis.Scripter, fsys embed.FS, asRun map[string]func() error) {
	t.Helper()
	entries, err := fsys.ReadDir("scripts")
	if err != nil || len(entries) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, e := range entries {
		name := e.Name()
		b, err := fsys.ReadFile("scripts/" + name)
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		if !strings.HasPrefix(src, "-- "+strings.TrimSuffix(name, ".lua")+":") ||
			!strings.Contains(src, "KEYS[1]") || !strings.Contains(src, "ARGV[1]") || !strings.Contains(src, "returns") {
			t.Errorf("%s lacks its KEYS/ARGV/returns header", name)
		}
		if err := redis.NewScript(src).Load(context.Background(), rdb).Err(); err != nil {
			t.Errorf("%s does not compile: %v", name, err)
		}
		load, ok := asRun[name]
		if !ok {
			t.Errorf("%s is not loaded as it runs: add it to this test", name)
			continue
		}
		if err := load(); err != nil {
			t.Errorf("%s does not load as it runs: %v", name, err)
		}
	}
	if len(entries) != len(asRun) {
		t.Errorf("%d script files, %d loaded as they run", len(entries), len(asRun))
	}
}
