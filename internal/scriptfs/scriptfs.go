// Package scriptfs is the one loader of the Lua scripts that packages embed as scripts/*.lua
// (locking keeps its own: it imports nothing of the project's).
package scriptfs

import "embed"

// Read is the text of scripts/<name> in fsys; a missing script is a build mistake, so it panics.
func Read(fsys embed.FS, name string) string {
	b, err := fsys.ReadFile("scripts/" + name)
	if err != nil {
		panic(err)
	}
	return string(b)
}
