// Package registry is the list of task types cmd/jobguard runs, one line a type. It is the only
// package that imports the example tasks; the app is handed this list and knows tasks only
// through the contract (package tasks).
package registry

import (
	"github.com/jobguard/jobguard/tasks"
	"github.com/jobguard/jobguard/tasks/rebuildcache"
	"github.com/jobguard/jobguard/tasks/reservestock"
)

// All returns the registered task types, a fresh slice the caller may append to.
func All() []tasks.Task {
	return []tasks.Task{
		rebuildcache.Task,
		reservestock.Task,
	}
}
