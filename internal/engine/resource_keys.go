package engine

import "github.com/jobguard/jobguard/locking"

// ResourceKey is the key called name in resource's slot, "<prefix>:{<tag>}:<name>": the key a
// handler of a job on resource writes (Job.Key(name) is the same key) and a read model of the
// resource reads, so a task spells each of its keys once.
func ResourceKey(locks *locking.Client, resource, name string) string {
	return locks.Key(ResourceTag(resource), name)
}
