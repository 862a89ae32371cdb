package reservestock

import (
	"embed"

	"github.com/jobguard/jobguard/internal/scriptfs"
)

// Every script of this task is a file of scripts/, opening with its KEYS/ARGV/returns header.
//
//go:embed scripts/*.lua
var scriptFS embed.FS

// scriptBody is the text of scripts/<name>, for the bodies that middleware.NewEffect and
// locking.NewFencedScript complete with their preludes.
func scriptBody(name string) string {
	return scriptfs.Read(scriptFS, name)
}
