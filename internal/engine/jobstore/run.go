package jobstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartArgs are one delivery's start.
type StartArgs struct {
	Delivery string
	// Owner is the lease owner, fresh per delivery; a retried call with the same owner gets the
	// same token and attempt.
	Owner    string
	LeaseTTL time.Duration
	Now      time.Time
	// HasOpKey: the job has an operation key (Keys.Applied is its applied record).
	HasOpKey bool
}

// StartState is what the start script decided.
type StartState string

// The start states.
const (
	// Run: the handler runs with Token, Attempt, Payload, Checkpoint.
	Run StartState = "run"
	// Gone: no record (never created, or expired): acknowledge.
	Gone StartState = "gone"
	// Terminal: the job has ended (Status): acknowledge.
	Terminal StartState = "terminal"
	// Stale: not the job's current delivery (Current): acknowledge.
	Stale StartState = "stale"
	// Busy: another owner holds the resource's lease for Wait more: bounce, nothing spent.
	Busy StartState = "busy"
	// Applied: the operation was applied before; the job is done.
	Applied StartState = "applied"
	// Exhausted: no attempt left; the job is failed.
	Exhausted StartState = "exhausted"
	// Debounce: a replace set a later start, Wait from now: bounce.
	Debounce StartState = "debounce"
	// Unconfirmed: the enqueue that created the job is not confirmed yet: nothing written, ask again.
	Unconfirmed StartState = "unconfirmed"
	// Untaken: a delivery numbered past the record's deliveries (a replay's, or a rescue's of an
	// unstarted delivery: both are enqueued before the record takes them) not taken yet: ask again.
	Untaken StartState = "untaken"
	// StartExpired: the job waited past its start_by; the start made it expired: acknowledge.
	StartExpired StartState = "expired"
	// StartHeld: a workflow's node whose release delivered it before making its record queued
	// (wf_release.lua runs after the delivery): nothing written, ask again.
	StartHeld StartState = "held"
)

// Started is the start script's answer.
type Started struct {
	State      StartState
	Token      int64
	Attempt    int
	Payload    []byte
	Checkpoint []byte
	CreatedAt  time.Time
	// Wait is how long to wait: the lease's remaining TTL (Busy), or the debounce (Debounce).
	Wait time.Duration
	// Status is the job's status (Terminal); Current its current delivery (Stale).
	Status, Current string
}

// Start begins one delivery of a job, in one round trip: stale-delivery check, the resource's
// lease and fencing token, attempt count, status processing, already-applied check, checkpoint.
// In durable mode a start the replicas did not acknowledge is answered with what it decided and
// an error wrapping ErrNotDurable: the caller must not run the handler (and undoes a Run).
func (s *Store) Start(ctx context.Context, k Keys, a StartArgs) (Started, error) {
	cmds, werr := s.batch.runDurable(ctx, []scriptCall{{startScript, func(ctx context.Context, c redis.Scripter) *redis.Cmd {
		return startScript.EvalSha(ctx, c, s.startKeys(k), s.startArgs(k, a)...)
	}}})
	res, err := cmds[0].Result()
	if err != nil {
		return Started{}, fmt.Errorf("jobstore: start: %w", err)
	}
	st, err := parseStarted(res)
	if err == nil && werr != nil {
		err = fmt.Errorf("jobstore: start: %w", werr)
	}
	return st, err
}

func (s *Store) startKeys(k Keys) []string {
	return []string{k.Record, k.Lease, k.Fence, k.Timeline, k.Applied, k.Marker}
}

func (s *Store) startArgs(k Keys, a StartArgs) []any {
	return []any{a.Delivery, a.Owner, ms(a.LeaseTTL), a.Now.UnixMilli(), s.cfg.WorkerID, s.cfg.TimelineCap, bit(a.HasOpKey),
		ms(s.cfg.Retention), k.Clear}
}

// parseStarted reads the start script's reply.
func parseStarted(res any) (Started, error) {
	state, rest, err := replyList("start", res)
	if err != nil {
		return Started{}, err
	}
	st := Started{State: StartState(state)}
	switch st.State {
	case Run:
		return startedRun(st, rest)
	case Busy, Debounce:
		wait, err := intAt("start", rest, 0)
		st.Wait = time.Duration(wait) * time.Millisecond
		return st, err
	case Terminal:
		st.Status, err = stringAt("start", rest, 0)
		return st, err
	case Stale:
		st.Current, err = stringAt("start", rest, 0)
		return st, err
	case Gone, Applied, Exhausted, Unconfirmed, Untaken, StartExpired, StartHeld:
		return st, nil
	}
	return Started{}, replyError("start", res)
}

// startedRun reads {"run", token, attempt, payload, checkpoint, created_at}.
func startedRun(st Started, rest []any) (Started, error) {
	token, err := intAt("start", rest, 0)
	if err != nil {
		return Started{}, err
	}
	attempt, err := intAt("start", rest, 1)
	if err != nil {
		return Started{}, err
	}
	payload, err := stringAt("start", rest, 2)
	if err != nil {
		return Started{}, err
	}
	cp, err := stringAt("start", rest, 3)
	if err != nil {
		return Started{}, err
	}
	created, err := intAt("start", rest, 4)
	if err != nil {
		return Started{}, err
	}
	st.Token, st.Attempt, st.Payload = token, int(attempt), []byte(payload)
	if cp != "" {
		st.Checkpoint = []byte(cp)
	}
	if created > 0 {
		st.CreatedAt = time.UnixMilli(created)
	}
	return st, nil
}

// Outcome is what the finish script writes.
type Outcome struct {
	// Status is done, retrying, failed, revoked, or queued (a shutdown requeue).
	Status Status
	// Event names the timeline event ("" for the status's own); Detail goes with it.
	Event, Detail string
	// Error is the job's last_error ("" when done).
	Error string
	// Result is stored when not empty.
	Result string
	// Refund gives the attempt back (shutdown requeue, rate limit).
	Refund bool
}

// FinishArgs are one run's end.
type FinishArgs struct {
	Delivery   string
	Token      int64
	Owner      string
	Now        time.Time
	HasOpKey   bool
	AppliedTTL time.Duration
	ClearOnEnd bool
	Outcome    Outcome
	// Release, when set, gives the run's limit slot back in the same round trip (a pipeline: the
	// limit's keys are in another slot).
	Release *LimitRelease
	// FairDone, when set, frees the job's fair admission in the same round trip (after the
	// finish, in the pipeline; one Redis node only) and answers in Finishing.FairDone.
	FairDone *FairDoneCall
	// JobID is the finishing job's id, for FairDone.
	JobID string
}

// FinishState is what the finish script found.
type FinishState string

// The finish states.
const (
	Finished FinishState = "ok"
	// FinishGone: no record.
	FinishGone FinishState = "gone"
	// StaleWrite: a newer token wrote the record (Current); nothing written but the event.
	StaleWrite FinishState = "stale"
	// Invalid: the transition from the job's status (Status) is not allowed.
	Invalid FinishState = "invalid"
)

// Finishing is the finish script's answer.
type Finishing struct {
	State   FinishState
	Current int64
	Status  string
	// Released is the limit release's error (nil when it was sent and answered, or not asked).
	Released error
	// FairDone is what FinishArgs.FairDone did (zero when not asked).
	FairDone FairDoneAnswer
}

// Finish ends one run of a job in one round trip: fenced final status, the operation recorded as
// applied (done, with an operation key), lease release, (Release) the limit slot's release and
// (FairDone) its fair admission's.
// In durable mode a finish that wrote but was not acknowledged by the replicas returns its answer
// with an error wrapping ErrNotDurable.
func (s *Store) Finish(ctx context.Context, k Keys, a FinishArgs) (Finishing, error) {
	o := a.Outcome
	calls := []scriptCall{{finishScript, func(ctx context.Context, c redis.Scripter) *redis.Cmd {
		return finishScript.EvalSha(ctx, c, []string{k.Record, k.Lease, k.Timeline, k.Applied, k.Marker},
			a.Token, a.Owner, string(o.Status), a.Now.UnixMilli(), o.Error, o.Result, ms(s.cfg.Retention), s.cfg.TimelineCap,
			bit(a.HasOpKey), ms(a.AppliedTTL), a.Delivery, o.Detail, s.cfg.WorkerID, o.Event, bit(o.Refund), bit(a.ClearOnEnd))
	}}}
	release, done := -1, -1
	if a.Release != nil {
		release = len(calls)
		calls = append(calls, scriptCall{limitReleaseScript, a.Release.eval})
	}
	if a.FairDone != nil {
		done = len(calls)
		calls = append(calls, a.FairDone.call(s, k.Record, a.JobID, a.Now))
	}
	cmds, werr := s.batch.runDurable(ctx, calls)
	var released error
	if release >= 0 {
		if released = cmds[release].Err(); released != nil {
			released = fmt.Errorf("jobstore: limit release: %w", released)
		}
	}
	var fair FairDoneAnswer
	if done >= 0 {
		fair = a.FairDone.answer(cmds[done]) // what it admitted is delivered whatever the finish answered
	}
	res, err := cmds[0].Result()
	if err != nil {
		return Finishing{Released: released, FairDone: fair}, fmt.Errorf("jobstore: finish: %w", err)
	}
	state, rest, err := replyList("finish", res)
	if err != nil {
		return Finishing{FairDone: fair}, err
	}
	f := Finishing{State: FinishState(state), Released: released, FairDone: fair}
	if werr != nil && f.State == Finished {
		// Written on the master, maybe not on a replica: the caller keeps the delivery.
		return f, fmt.Errorf("jobstore: finish: %w", werr)
	}
	switch f.State {
	case Finished, FinishGone:
		return f, nil
	case StaleWrite:
		f.Current, err = intAt("finish", rest, 0)
		return f, err
	case Invalid:
		f.Status, err = stringAt("finish", rest, 0)
		return f, err
	}
	return Finishing{FairDone: fair}, replyError("finish", res)
}
