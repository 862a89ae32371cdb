package rebuildcache

import (
	"context"
	"testing"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// Every script of rebuild-cache is a file with its KEYS/ARGV/returns header that a real Redis
// compiles, alone and inside the fence prelude it runs in.
func TestScriptsLoad(t *testing.T) {
	t.Parallel()
	rdb := redistest.NewDB(t).Client
	testsupport.ScriptsLoad(t, rdb, scriptFS, map[string]func() error{
		"cache_write.lua": func() error { return cacheWrite.Load(context.Background(), rdb) },
	})
}
