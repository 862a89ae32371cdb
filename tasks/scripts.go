package tasks

import (
	"embed"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/scriptfs"
)

// Every script of the task types is a file of scripts/, opening with its KEYS/ARGV/returns header.
//
//go:embed scripts/*.lua
var scriptFS embed.FS

// scripts are the task types' scripts: their bodies, which engine.NewEffect and
// locking.NewFencedScript complete with their preludes, and whole scripts (mustScript).
var scripts = scriptfs.Dir(scriptFS)

// mustScript is scripts/<name> as a script of its own.
func mustScript(name string) *redis.Script { return redis.NewScript(scripts.Read(name)) }
