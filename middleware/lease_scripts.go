package middleware

import (
	"context"
	"embed"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/scriptfs"
	"github.com/jobguard/jobguard/locking"
)

//go:embed scripts/*.lua
var scriptFiles embed.FS

// mustScript is scripts/<name> after locking's protocol fragment.
func mustScript(name string) *redis.Script {
	return locking.NewProtocolScript(scriptfs.Dir(scriptFiles).Read(name))
}

var (
	leaseStartScript  = mustScript("lease_start.lua")
	leaseFinishScript = mustScript("lease_finish.lua")
	leaseRescueScript = mustScript("lease_rescue.lua")
	shardsGrowScript  = mustScript("shards_grow.lua")
	// allScripts are loaded by the test that checks every script compiles in a real Redis.
	allScripts = []*redis.Script{leaseStartScript, leaseFinishScript, leaseRescueScript, shardsGrowScript}
)

// runMarkerTTL bounds how long a lease-level run's marker outlives a worker that died with no
// rescuer running; a run's own end deletes it.
const runMarkerTTL = 24 * time.Hour

// supersededTTL is how long a superseded task's marker is kept: longer than the original can come
// back (asynq's recoverer retries it after the application's RetryDelayFunc, n^4 s by default, and
// an operator may run an archived original within asynq's 90-day archive). Only rescued tasks have one.
const supersededTTL = 90 * 24 * time.Hour

// leaseKeys are the keys of one lease-level run, all in the resource's slot.
type leaseKeys struct {
	lease, fence, marker, prevMarker string
}

func runMarkerKey(locks *locking.Client, resource, taskID string) string {
	return locks.Key(resource, "run:"+taskID)
}

// leaseStarted is lease_start.lua's answer.
type leaseStarted struct {
	state string // "run", "held", "superseded", "stale_copy"
	token int64  // the run's fencing token (run)
	wait  time.Duration
	by    string // the copy that superseded this task (superseded)
}

type leaseStartArgs struct {
	owner  string
	ttl    time.Duration
	taskID string
	isCopy bool
	// fenceTTL is the fence counter's TTL (0: none, a long-lived resource's).
	fenceTTL time.Duration
}

// scriptRunner runs a script's call: the engine's batcher (calls of concurrent runs share a
// pipeline), or a plain client.
type scriptRunner func(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd

// durableRunner is a scriptRunner for a write that makes a promise: in durable mode the call's
// pipeline ends with a WAIT, whose verdict is the error (jobstore.Store.RunScriptDurable).
type durableRunner func(ctx context.Context, script *redis.Script, keys []string, args ...any) (*redis.Cmd, error)

// runLeaseStart runs lease_start.lua; a start the replicas did not acknowledge (durable mode)
// answers what it decided and an error wrapping ErrNotDurable.
func runLeaseStart(ctx context.Context, run durableRunner, k leaseKeys, a leaseStartArgs) (leaseStarted, error) {
	isCopy := 0
	if a.isCopy {
		isCopy = 1
	}
	cmd, werr := run(ctx, leaseStartScript, []string{k.lease, k.fence, k.marker, k.prevMarker},
		a.owner, a.ttl.Milliseconds(), runMarkerTTL.Milliseconds(), a.taskID, isCopy, a.fenceTTL.Milliseconds(),
		supersededTTL.Milliseconds())
	res, err := cmd.Result()
	if err != nil {
		return leaseStarted{}, fmt.Errorf("middleware: lease start: %w", err)
	}
	st, err := parseLeaseStarted(res)
	if err == nil && werr != nil {
		err = fmt.Errorf("middleware: lease start: %w", werr)
	}
	return st, err
}

// parseLeaseStarted reads lease_start.lua's reply.
func parseLeaseStarted(res any) (leaseStarted, error) {
	list, ok := res.([]any)
	if !ok || len(list) == 0 {
		return leaseStarted{}, replyError("lease_start", res)
	}
	st := leaseStarted{}
	st.state, _ = list[0].(string)
	switch {
	case st.state == "stale_copy":
		return st, nil
	case len(list) < 2:
	case st.state == "superseded":
		if st.by, ok = list[1].(string); ok {
			return st, nil
		}
	case st.state == "run" || st.state == "held":
		n, ok := list[1].(int64)
		if ok && st.state == "run" {
			st.token = n
			return st, nil
		}
		if ok {
			st.wait = time.Duration(n) * time.Millisecond
			return st, nil
		}
	}
	return leaseStarted{}, replyError("lease_start", res)
}

// leaseFinished is lease_finish.lua's answer.
type leaseFinished struct {
	released, superseded bool
}

func runLeaseFinish(ctx context.Context, run scriptRunner, k leaseKeys, owner string) (leaseFinished, error) {
	return leaseFinishedOf(run(ctx, leaseFinishScript, []string{k.lease, k.marker}, owner))
}

// leaseFinishedOf reads lease_finish.lua's answer.
func leaseFinishedOf(cmd *redis.Cmd) (leaseFinished, error) {
	res, err := cmd.Result()
	if err != nil {
		return leaseFinished{}, fmt.Errorf("middleware: lease finish: %w", err)
	}
	list, ok := res.([]any)
	if !ok || len(list) != 2 {
		return leaseFinished{}, replyError("lease_finish", res)
	}
	rel, ok1 := list[0].(int64)
	sup, ok2 := list[1].(int64)
	if !ok1 || !ok2 {
		return leaseFinished{}, replyError("lease_finish", res)
	}
	return leaseFinished{released: rel == 1, superseded: sup == 1}, nil
}

// runLeaseRescue checks (copyID "") or commits the rescue of a run: "lost", "superseded", "alive"
// or "skip".
func runLeaseRescue(ctx context.Context, rdb redis.Scripter, k leaseKeys, copyID string) (string, error) {
	mode := "check"
	if copyID != "" {
		mode = "commit"
	}
	res, err := leaseRescueScript.Run(ctx, rdb, []string{k.lease, k.marker}, mode, copyID, supersededTTL.Milliseconds()).Result()
	if err != nil {
		return "", fmt.Errorf("middleware: lease rescue: %w", err)
	}
	state, ok := res.(string)
	switch {
	case !ok:
	case state == "lost" && copyID == "", state == "superseded" && copyID != "", state == "alive", state == "skip":
		return state, nil
	}
	return "", replyError("lease_rescue", res)
}

// The steps of handing a task that never started to a copy (lease_rescue.lua).
const (
	adoptMark   = "adopt"   // mark the task adopting by the copy; answers the copy to enqueue
	adoptCommit = "adopted" // the copy is enqueued: the task is superseded by it
	adoptUndo   = "unadopt" // the copy was not enqueued: the mark goes
)

// runLeaseAdopt runs one step of handing task k.marker's, which never started, to copy copyID.
// Mark answers the copy to enqueue (copyID, or the one an earlier pass marked) and true, or false
// when the task started; commit answers true when the task is the copy's; undo answers false.
func runLeaseAdopt(ctx context.Context, rdb redis.Scripter, k leaseKeys, step, copyID string) (string, bool, error) {
	res, err := leaseRescueScript.Run(ctx, rdb, []string{k.lease, k.marker}, step, copyID, supersededTTL.Milliseconds()).Result()
	if err != nil {
		return "", false, fmt.Errorf("middleware: lease %s: %w", step, err)
	}
	state, _ := res.(string)
	switch {
	case state == "skip":
		return "", false, nil
	case step == adoptMark && strings.HasPrefix(state, "adopting:") && len(state) > len("adopting:"):
		return strings.TrimPrefix(state, "adopting:"), true, nil
	case step == adoptCommit && state == "superseded":
		return copyID, true, nil
	}
	return "", false, replyError("lease_rescue", res)
}

func replyError(script string, res any) error {
	return fmt.Errorf("middleware: %s script: unexpected reply %v", script, res)
}
