package tasks

import (
	"context"
	"testing"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// Every script of the contract is a file with its KEYS/ARGV/returns header that a real Redis
// compiles, alone and as it runs.
func TestScriptsLoad(t *testing.T) {
	t.Parallel()
	rdb := redistest.NewDB(t).Client
	ctx := context.Background()
	testsupport.ScriptsLoad(t, rdb, scriptFS, map[string]func() error{
		"identity_claim.lua":   func() error { return identityClaim.Load(ctx, rdb).Err() },
		"identity_release.lua": func() error { return identityRelease.Load(ctx, rdb).Err() },
	})
}
