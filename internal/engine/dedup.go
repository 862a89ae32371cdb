package engine

import "time"

// Policy is how duplicate requests for the same dedup key collapse. jobguard keeps its own
// markers (asynq's TaskID conflicts in every state, and Unique is released only on success). A
// marker is written with a short claim before the enqueue, so a crash in between blocks nothing
// for longer than the claim.
type Policy string

// The dedup policies.
const (
	// UntilStarted collapses duplicates while a job for the key waits; once it has started (its
	// lease was acquired), the next request queues exactly one follow-up, so an update that arrives
	// mid-run is never lost.
	UntilStarted Policy = "until_started"
	// UntilDone collapses duplicates until the job is done, failed or revoked (or the TTL passes).
	UntilDone Policy = "until_done"
	// Throttle allows at most one job per key per window (the TTL).
	Throttle Policy = "throttle"
	// Replace makes a request for a waiting job replace the payload it will run with; with a
	// Debounce, each replace also moves its start to Debounce from now.
	Replace Policy = "replace"
)

// clearsAt says when a policy's marker is removed: at start, at the end, or never (it expires).
func (p Policy) clearsAt() string {
	switch p {
	case UntilStarted, Replace:
		return "start"
	case UntilDone:
		return "done"
	}
	return ""
}

func (p Policy) valid() bool {
	switch p {
	case UntilStarted, UntilDone, Throttle, Replace:
		return true
	}
	return false
}

// Dedup is a job's dedup policy and key. The key is scoped to the job's resource (its marker lives
// in the resource's slot), so it only needs to tell apart the requests of one resource.
type Dedup struct {
	Policy Policy
	Key    string
	// TTL bounds how long the marker may collapse requests (default 24h); for Throttle it is the
	// window.
	TTL time.Duration
	// Debounce (Replace only) delays the job's start to Debounce after the latest request.
	Debounce time.Duration
}

// claimTTL is how long a marker written before its enqueue blocks others if the process dies
// before confirming it.
const claimTTL = 30 * time.Second
