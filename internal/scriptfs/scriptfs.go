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

// Dir is a package's embedded scripts/*.lua (go:embed declares it in the package that holds the
// files), read by name: var scripts = scriptfs.Dir(scriptFS).
type Dir embed.FS

// Read is the text of scripts/<name> (Read above).
func (d Dir) Read(name string) string { return Read(embed.FS(d), name) }
