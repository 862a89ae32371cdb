package rebuildcache

import (
	"embed"

	"github.com/jobguard/jobguard/internal/scriptfs"
)

// Every script of this task is a file of scripts/, opening with its KEYS/ARGV/returns header.
//
//go:embed scripts/*.lua
var scriptFS embed.FS

// scripts are this task's script bodies, which middleware.NewEffect and locking.NewFencedScript
// complete with their preludes.
var scripts = scriptfs.Dir(scriptFS)
