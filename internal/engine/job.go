package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/freetext"
	"github.com/jobguard/jobguard/internal/seal"
	"github.com/jobguard/jobguard/locking"
)

// Job is a handler's view of the job it runs: identity, payload, attempt, the lease's fence, the
// last checkpoint, and the fenced ways to write.
type Job struct {
	ID       string
	Type     string
	Queue    string
	Delivery string // asynq task id of this delivery
	Payload  []byte
	// Attempt is 1-based and counts runs that started, not bounces.
	Attempt     int
	MaxAttempts int
	OpKey       string
	// Checkpoint is what an earlier attempt saved with SaveCheckpoint, nil when none.
	Checkpoint []byte
	CreatedAt  time.Time
	Headers    map[string]string

	// What a run needs of the engine, and no more: the job's keys, its client, its clock.
	locks *locking.Client
	rdb   redis.UniversalClient
	// durable is durable mode (Apply waits for the replicas).
	durable   jobstore.Durability
	clock     locking.Clock
	retention time.Duration
	keys      jobstore.Keys
	tc        TaskConfig
	ring      *seal.Ring // seals the checkpoint of an encrypted type
	lease     *locking.Lease
	result    string
	// slot is the run's limit slot (nil when the job is not limited), kept by limits.
	slot   *slot
	limits *limiter
	// parents reads a workflow node's parents (Stack.ParentResults).
	parents func(ctx context.Context, id string) (map[string]ParentResult, error)
}

// ParentResults reads the job's workflow parents (their status and result), by node id; empty
// when the job is no workflow's node, or a root.
func (j *Job) ParentResults(ctx context.Context) (map[string]ParentResult, error) {
	if j.parents == nil {
		return map[string]ParentResult{}, nil
	}
	return j.parents(ctx, j.ID)
}

// LimitToken is the fencing token of the run's limit slot (0 when its job holds none): tokens of
// one key rise with every slot taken, so an upstream can refuse a holder older than one it saw.
func (j *Job) LimitToken() int64 {
	if j.slot == nil {
		return 0
	}
	return j.slot.token
}

// LimitValidFor is how much longer the run's concurrency slot may be trusted: its TTL less a
// fifth since its last take or renewal was sent, on the monotonic clock (which runs on while the
// process is stopped); 0 once it lapsed or a renewal found it gone, and from then on. Check it
// right before work that must not overlap a newer holder of the key: the context is cancelled by
// a timer that may run after a handler resumed from a pause, while this looks at the clock (and
// cancels the context itself, cause ErrSlotLost, when it finds the slot lapsed). A run that holds
// no concurrency slot (its job is not limited, or by a rate only) has none to lose: the largest
// Duration.
func (j *Job) LimitValidFor() time.Duration {
	if j.slot == nil || j.limits == nil {
		return unbounded
	}
	return j.limits.remaining(j.slot)
}

// LimitStart is when the take of the run's limit granted its start, in Redis's clock (ms): with a
// rate limit the start the rate reserved (the delivery waited for it), else when the slot was
// taken; zero when its job is not limited.
func (j *Job) LimitStart() time.Time {
	if j.slot == nil {
		return time.Time{}
	}
	return j.slot.at
}

// Fence is the token and owner of this run's lease; carry it to every write, in Redis or elsewhere
// (e.g. SQL "UPDATE ... SET fence_token = $1 WHERE fence_token < $1").
func (j *Job) Fence() locking.Fence { return j.lease.Fence() }

// Lease is this run's resource lease (kept renewed by the stack while the handler runs).
func (j *Job) Lease() *locking.Lease { return j.lease }

// Key is the key called name in the job's resource slot, for the handler's own fenced scripts.
func (j *Job) Key(name string) string { return j.locks.Key(j.keys.Tag, name) }

// Locks is the stack's locking client, for SetFields, SetValue and fenced scripts.
func (j *Job) Locks() *locking.Client { return j.locks }

// Redis is the stack's client.
func (j *Job) Redis() redis.UniversalClient { return j.rdb }

// SetResult sets the short result stored in the job record when the job is done. A control or
// format character in it is stored escaped (freetext.Escape): it is shown on terminals and pages.
func (j *Job) SetResult(result string) { j.result = freetext.Escape(result) }

// SaveCheckpoint stores progress in the job record, fenced: a later attempt starts with it in
// Checkpoint. It fails with locking.ErrStaleToken when a newer run owns the job.
func (j *Job) SaveCheckpoint(ctx context.Context, data []byte) (err error) {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	ctx, span := scriptSpan(ctx, "jobguard.checkpoint")
	defer func() { endSpan(span, err) }()
	if data, err = sealValue(j.ring, j.tc, j.ID, jobstore.FieldCheckpoint, data); err != nil {
		return err
	}
	return j.locks.SetFields(ctx, j.Fence(), j.keys.Record, j.retention,
		jobstore.FieldCheckpoint, string(data), jobstore.FieldCheckpointAt, j.clock.Now().UnixMilli())
}

// ErrProgressBackwards: Progress was called with less than this run reported before.
var ErrProgressBackwards = jobstore.ErrProgressBackwards

// maxProgressNote bounds a progress note (bytes).
const maxProgressNote = 200

// Progress reports how far the run is (percent 0-100, a short note), shown in the job view. It is
// fenced: a run whose job was cancelled or taken over gets locking.ErrStaleToken and writes
// nothing; within one run it never goes backwards (ErrProgressBackwards, nothing written). A new
// run of the job (a retry) starts again from its own first report.
func (j *Job) Progress(ctx context.Context, percent int, note string) (err error) {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	if percent < 0 || percent > 100 || len(note) > maxProgressNote {
		return fmt.Errorf("engine: progress %d%% with a %d-byte note: percent is 0-100, the note at most %d bytes", percent, len(note), maxProgressNote)
	}
	if err := freetext.Check(note); err != nil {
		// The note is shown on terminals and pages: refused, as the API refuses a cancel reason.
		return fmt.Errorf("engine: progress note: %w", err)
	}
	ctx, span := scriptSpan(ctx, "jobguard.progress")
	defer func() { endSpan(span, err) }()
	return jobstore.SaveProgress(ctx, j.rdb, j.keys, j.Fence(), jobstore.ProgressArgs{
		Percent: percent, Note: note, Now: j.clock.Now(), Retention: j.retention,
	})
}

func (j *Job) age() time.Duration {
	if j.CreatedAt.IsZero() || j.CreatedAt.Unix() == 0 {
		return 0
	}
	return j.clock.Now().Sub(j.CreatedAt)
}

// Effect is a fenced script that applies a side effect at most once per operation key: it commits
// the effect and the applied-operation record together, in one script over the job's slot.
type Effect struct{ script *locking.FencedScript }

// NewEffect builds an effect from a Lua body. In the body, KEYS[1] is the fence record of the
// target (a hash), KEYS[2] the applied-operation record, KEYS[3..#KEYS-2] the caller's keys,
// KEYS[#KEYS-1] the job record (the frame checks the job's fence there: a cancelled run applies
// nothing) and KEYS[#KEYS] the resource's fence counter (the fence prelude's); ARGV[1..4] are reserved (token, owner, job id, applied TTL) and the caller's arguments
// start at ARGV[5]. The body's return value is returned by Apply.
func NewEffect(body string) *Effect {
	return &Effect{script: locking.NewFencedScript(jobstore.EffectFrame(body))}
}

// Load loads the effect's script into Redis (every master of a cluster), e.g. to check in a test
// that it compiles as it runs.
func (e *Effect) Load(ctx context.Context, rdb redis.Scripter) error { return e.script.Load(ctx, rdb) }

// Apply runs eff for this job's operation: target is the fence record of what it changes (a hash
// in the job's slot), keys the body's own keys. It fails with ErrAlreadyApplied when the operation
// was applied before (nothing changes), and with locking.ErrStaleToken when a newer run wrote the
// target. A job without an operation key cannot Apply.
func (j *Job) Apply(ctx context.Context, eff *Effect, target string, keys []string, args ...any) (any, error) {
	if j.OpKey == "" {
		return nil, errors.New("engine: Apply needs a job with an operation key")
	}
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	ctx, span := scriptSpan(ctx, "jobguard.apply")
	defer span.End()
	all := append(append([]string{target, j.keys.Applied}, keys...), j.keys.Record)
	res, err := eff.run(ctx, j.rdb, j.durable, j.Fence(), all, append([]any{j.ID, j.tc.AppliedTTL.Milliseconds()}, args...)...)
	if err != nil && strings.HasPrefix(err.Error(), "APPLIED ") {
		return nil, fmt.Errorf("%w by job %s", ErrAlreadyApplied, strings.TrimPrefix(err.Error(), "APPLIED "))
	}
	return res, err
}

// run runs the effect for fence f; in durable mode with a WAIT in its round trip, and an effect
// that ran but was not acknowledged by the replicas returns ErrNotDurable (see durable.go).
func (e *Effect) run(ctx context.Context, rdb redis.UniversalClient, d jobstore.Durability, f locking.Fence, keys []string, args ...any) (any, error) {
	if !d.On() {
		return e.script.Run(ctx, rdb, f, keys, args...).Result()
	}
	for try := 0; ; try++ {
		var cmd *redis.Cmd
		werr := d.Exec(ctx, rdb, func(pipe redis.Pipeliner) { cmd = e.script.Queue(ctx, pipe, f, keys, args...) })
		if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") && try == 0 {
			if lerr := e.script.Load(ctx, rdb); lerr != nil {
				return nil, lerr
			}
			continue // it did not run
		}
		res, err := e.script.Reply(f, cmd).Result()
		if err != nil {
			return nil, err // refused or failed: nothing was written
		}
		if werr != nil {
			return res, fmt.Errorf("engine: apply: %w", werr)
		}
		return res, nil
	}
}

// RunFor runs the effect for a run that holds fence f outside a job (the middleware's lease level):
// KEYS are laid out as for Apply, with the target itself in the job record's place (a run without
// a record is cancelled only by a newer token, which the fence prelude already refuses).
func (e *Effect) RunFor(ctx context.Context, rdb redis.UniversalClient, d jobstore.Durability, f locking.Fence, target, applied string, keys []string, runID string, appliedTTL time.Duration, args ...any) (any, error) {
	all := append(append([]string{target, applied}, keys...), target)
	res, err := e.run(ctx, rdb, d, f, all, append([]any{runID, appliedTTL.Milliseconds()}, args...)...)
	if err != nil && strings.HasPrefix(err.Error(), "APPLIED ") {
		return nil, fmt.Errorf("%w by %s", ErrAlreadyApplied, strings.TrimPrefix(err.Error(), "APPLIED "))
	}
	return res, err
}
