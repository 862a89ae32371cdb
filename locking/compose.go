package locking

import (
	"regexp"
	"strings"
)

// Redis runs a script's whole text at every call, so every local function a fragment defines is
// created again each time, used or not (about 20,000 of Redis's instructions for this package's
// protocol and a caller's prelude, per call, measured with callgrind), and EVAL hashes the whole
// text. Compose keeps what a body uses.

// definition is one top-level definition of a fragment: a `local function name(...)` or a
// `local name = ...`, up to the next one.
type definition struct {
	names []string
	text  string
}

var (
	definitionStart = regexp.MustCompile(`^local (?:function )?([A-Za-z_][A-Za-z0-9_]*(?:\s*,\s*[A-Za-z_][A-Za-z0-9_]*)*)`)
	identifier      = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
)

// definitions splits a fragment (a file of top-level local definitions and comments) into its
// definitions; its comment lines at the top level are left out.
func definitions(fragment string) []definition {
	var defs []definition
	for _, line := range strings.SplitAfter(fragment, "\n") {
		if m := definitionStart.FindStringSubmatch(line); m != nil {
			defs = append(defs, definition{names: identifier.FindAllString(m[1], -1)})
		}
		if len(defs) == 0 || strings.HasPrefix(line, "--") {
			continue
		}
		defs[len(defs)-1].text += line
	}
	return defs
}

// Compose returns body preceded by the definitions of fragments that it uses, directly or through
// one another, in the fragments' order (so that each is defined before it is used, as in the
// fragments). A fragment is Lua made of top-level local definitions (`local function f(...)`,
// `local t = {...}`) and comments only, like scripts/protocol.lua.
func Compose(body string, fragments ...string) string {
	var defs []definition
	for _, f := range fragments {
		defs = append(defs, definitions(f)...)
	}
	used := make([]bool, len(defs))
	words := map[string]bool{}
	for _, w := range identifier.FindAllString(body, -1) {
		words[w] = true
	}
	for grew := true; grew; {
		grew = false
		for i, d := range defs {
			if used[i] || !usesAny(words, d.names) {
				continue
			}
			used[i], grew = true, true
			for _, w := range identifier.FindAllString(d.text, -1) {
				words[w] = true
			}
		}
	}
	var b strings.Builder
	for i, d := range defs {
		if used[i] {
			b.WriteString(d.text)
		}
	}
	b.WriteString(body)
	return b.String()
}

func usesAny(words map[string]bool, names []string) bool {
	for _, n := range names {
		if words[n] {
			return true
		}
	}
	return false
}
