package reservestock

import (
	"context"
	"testing"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// Every script of reserve-stock is a file with its KEYS/ARGV/returns header that a real Redis
// compiles, alone and as the effect it runs as.
func TestScriptsLoad(t *testing.T) {
	t.Parallel()
	rdb := redistest.NewDB(t).Client
	testsupport.ScriptsLoad(t, rdb, scriptFS, map[string]func() error{
		"reserve_effect.lua": func() error { return reserveEffect.Load(context.Background(), rdb) },
	})
}
