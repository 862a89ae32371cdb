package middleware

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/locking"
)

// ErrNotAJob: the run is at lease level, which keeps no job record (progress, checkpoints and
// results are job-level).
var ErrNotAJob = errors.New("middleware: the run has no job record (lease level)")

// ErrAlreadyApplied: Run.Apply's operation was applied before; nothing changed.
var ErrAlreadyApplied = engine.ErrAlreadyApplied

// Run is a protected handler's view of its run: the lease it holds, the fencing token every write
// must carry, and the fenced ways to write. Get it with RunFrom.
type Run struct {
	// job is the engine's job at job level; nil at lease level.
	job *engine.Job
	// The lease level's own.
	lease      *locking.Lease
	locks      *locking.Client
	taskID     string
	opKey      string
	resource   string
	appliedTTL time.Duration
	attempt    int
	// slot is the run's limit slot (nil when its task is not limited).
	slot    *engine.Slot
	durable engine.Durability
}

type runKey struct{}

func withRun(ctx context.Context, r *Run) context.Context { return context.WithValue(ctx, runKey{}, r) }

// RunFrom is the run of the protected task whose handler ctx was given; false for a task the
// guard does not protect.
func RunFrom(ctx context.Context) (*Run, bool) {
	r, ok := ctx.Value(runKey{}).(*Run)
	return r, ok
}

// JobID is the job's id at job level, "" at lease level.
func (r *Run) JobID() string {
	if r.job != nil {
		return r.job.ID
	}
	return ""
}

// Attempt is the 1-based attempt of this run: jobguard's count at job level (bounces never
// spend one), asynq's retry count plus one at lease level.
func (r *Run) Attempt() int {
	if r.job != nil {
		return r.job.Attempt
	}
	return r.attempt
}

// OpKey is the run's operation key: Run.Apply applies an effect once per op key.
func (r *Run) OpKey() string {
	if r.job != nil {
		return r.job.OpKey
	}
	return r.opKey
}

// Lease is the run's resource lease, renewed by the guard while the handler runs. The handler's
// context ends (cause locking.ErrLeaseLost) when it is lost.
func (r *Run) Lease() *locking.Lease {
	if r.job != nil {
		return r.job.Lease()
	}
	return r.lease
}

// Fence is the run's fencing token and owner: carry it to every write, in Redis (Locks().SetValue,
// SetFields, a FencedScript) or elsewhere (SQL "UPDATE ... WHERE fence_token < $1", see sqlfence).
func (r *Run) Fence() locking.Fence { return r.Lease().Fence() }

// ValidFor is how much longer the lease, and the limit slot of the run's key when it holds one,
// may be trusted (TTL less a safety margin since the last renewal, on the monotonic clock); check
// it right before a write outside Redis that a fence cannot guard. A lapsed slot found here
// cancels the handler's context at once (cause ErrSlotLost).
func (r *Run) ValidFor() time.Duration {
	v := r.Lease().ValidFor()
	if r.job != nil {
		return min(v, r.job.LimitValidFor())
	}
	return min(v, r.slot.ValidFor())
}

// LimitToken is the fencing token of the run's limit slot (0 when it holds none): tokens of one
// key rise with every slot taken, so an upstream can refuse a holder older than one it saw.
func (r *Run) LimitToken() int64 {
	if r.job != nil {
		return r.job.LimitToken()
	}
	return r.slot.Token()
}

// LimitStart is the start the run's limit granted, in Redis's clock (ms): with a rate, the start
// the rate reserved (the delivery waited for it), else when the slot was taken; zero when the
// run is not limited.
func (r *Run) LimitStart() time.Time {
	if r.job != nil {
		return r.job.LimitStart()
	}
	return r.slot.At()
}

// Key is the key called name in the run's resource slot ("<prefix>:{<resource>}:<name>"), for
// the handler's own fenced scripts, which must keep their keys in one slot. The names "lock",
// "fence", "run:*", "applied:*" and "job:*" are jobguard's.
func (r *Run) Key(name string) string {
	if r.job != nil {
		return r.job.Key(name)
	}
	return r.locks.Key(r.resource, name)
}

// Locks is the guard's locking client, for SetFields, SetValue and fenced scripts.
func (r *Run) Locks() *locking.Client {
	if r.job != nil {
		return r.job.Locks()
	}
	return r.locks
}

// Apply runs eff for the run's operation once: target is the fence record of what it changes (a
// hash key from Run.Key), keys the body's own keys (from Run.Key too). ErrAlreadyApplied when the
// operation was applied before (nothing changes); locking.ErrStaleToken when a newer run of the
// resource holds a higher token (nothing changes).
func (r *Run) Apply(ctx context.Context, eff *Effect, target string, keys []string, args ...any) (any, error) {
	if r.job != nil {
		return r.job.Apply(ctx, eff.e, target, keys, args...)
	}
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	applied := r.locks.Key(r.resource, "applied:"+r.opKey)
	return eff.e.RunFor(ctx, r.locks.Redis(), r.durable, r.Fence(), target, applied, keys, r.taskID, r.appliedTTL, args...)
}

// Progress reports how far the job is (percent 0-100, a note of at most 200 bytes of printable
// text: a control or format character such as ESC or U+202E is an error), fenced, never backwards
// within a run. Job level only (ErrNotAJob).
func (r *Run) Progress(ctx context.Context, percent int, note string) error {
	if r.job == nil {
		return ErrNotAJob
	}
	return r.job.Progress(ctx, percent, note)
}

// SaveCheckpoint stores data in the job record, fenced; a later attempt finds it in Checkpoint.
// Job level only (ErrNotAJob).
func (r *Run) SaveCheckpoint(ctx context.Context, data []byte) error {
	if r.job == nil {
		return ErrNotAJob
	}
	return r.job.SaveCheckpoint(ctx, data)
}

// Checkpoint is what an earlier attempt saved with SaveCheckpoint (nil when none, and at lease
// level).
func (r *Run) Checkpoint() []byte {
	if r.job == nil {
		return nil
	}
	return r.job.Checkpoint
}

// SetResult sets the short result kept in the job record when the job is done (job level; at
// lease level it does nothing: use asynq's ResultWriter). Control and format characters in it are
// stored escaped.
func (r *Run) SetResult(result string) {
	if r.job != nil {
		r.job.SetResult(result)
	}
}

// Effect is a fenced Lua script that applies a side effect at most once per operation key: the
// effect and its applied-operation record commit together, in one script over the run's slot.
type Effect struct{ e *engine.Effect }

// NewEffect builds an effect from a Lua body. In the body KEYS[1] is the target's fence record (a
// hash), KEYS[2] the applied-operation record, and the caller's keys start at KEYS[3]; ARGV[1..4]
// are reserved and the caller's arguments start at ARGV[5]. The body's return value is Apply's.
func NewEffect(body string) *Effect { return &Effect{e: engine.NewEffect(body)} }

// Load loads the effect's script into Redis (every master of a cluster): a test can check that
// its body compiles before a run needs it.
func (e *Effect) Load(ctx context.Context, rdb redis.Scripter) error { return e.e.Load(ctx, rdb) }
