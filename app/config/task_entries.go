package config

import (
	"slices"
	"strings"

	"github.com/jobguard/jobguard/tasks"
)

// The variables that name task types (ENCRYPT_TYPES, TASK_LIMITS) read their lists alike: one
// rule for what an entry is and one for finding its type.

// eachTaskEntry is a copy of list with apply called on it for each entry of v (taskEntries), or
// the first error apply returns.
func eachTaskEntry(v, sep string, list []tasks.Task, apply func(out []tasks.Task, entry string) error) ([]tasks.Task, error) {
	out := slices.Clone(list)
	for _, e := range taskEntries(v, sep) {
		if err := apply(out, e); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// taskEntries are v's entries separated by sep, trimmed; empty ones (a trailing separator) are
// left out.
func taskEntries(v, sep string) []string {
	var out []string
	for _, e := range strings.Split(v, sep) {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// taskIndex is the index of task type typ (trimmed) in list, -1 when list has no such type.
func taskIndex(list []tasks.Task, typ string) int {
	typ = strings.TrimSpace(typ)
	return slices.IndexFunc(list, func(t tasks.Task) bool { return t.Type == typ })
}
