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

// scriptBody is the text of scripts/<name>, for the bodies that engine.NewEffect and
// locking.NewFencedScript complete with their preludes.
func scriptBody(name string) string {
	return scriptfs.Read(scriptFS, name)
}

// mustScript is scripts/<name> as a script of its own.
func mustScript(name string) *redis.Script { return redis.NewScript(scriptBody(name)) }
