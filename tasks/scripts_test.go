package tasks

import (
	"context"
	"strings"
	"testing"

	"github.com/jobguard/jobguard/internal/redistest"
)

// Every task script is a file with its KEYS/ARGV/returns header that a real Redis compiles, alone
// and as it runs (inside the fence prelude for the fenced bodies).
func TestScriptsLoad(t *testing.T) {
	t.Parallel()
	rdb := redistest.NewDB(t).Client
	ctx := context.Background()
	asRun := map[string]func() error{
		"identity_claim.lua":   func() error { return identityClaim.Load(ctx, rdb).Err() },
		"identity_release.lua": func() error { return identityRelease.Load(ctx, rdb).Err() },
		"cache_write.lua":      func() error { return cacheWrite.Load(ctx, rdb) },
		"reserve_effect.lua":   func() error { return reserveEffect.Load(ctx, rdb) },
	}
	entries, err := scriptFS.ReadDir("scripts")
	if err != nil || len(entries) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, e := range entries {
		name := e.Name()
		src := scriptBody(name)
		if !strings.HasPrefix(src, "-- "+strings.TrimSuffix(name, ".lua")+":") ||
			!strings.Contains(src, "KEYS[1]") || !strings.Contains(src, "ARGV[1]") || !strings.Contains(src, "returns") {
			t.Errorf("%s lacks its KEYS/ARGV/returns header", name)
		}
		if err := mustScript(name).Load(ctx, rdb).Err(); err != nil {
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
