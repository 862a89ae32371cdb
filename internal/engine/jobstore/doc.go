// Package jobstore keeps jobguard's jobs in Redis: the record's schema, every key of a job, and
// one typed Go function per script (create, confirm, start, finish, replay, rescue, ...), each
// checking the shape of its reply. Its scripts are built from locking's protocol fragment (lease,
// fencing token, fence check) and a prelude of its own (the deadline check, named record reads,
// the timeline append), so the lease and fence protocol is written once, in locking.
//
// It knows nothing of asynq, Fiber or task types: the engine decides, the store writes.
package jobstore
