package jobstore

import (
	"strconv"
	"time"
)

// The job record's fields: the one place their names are spelled in Go. The scripts read them by
// the same names (record_get in scripts/prelude.lua); TestScriptsUseOnlyRecordFields holds the
// two lists together.
const (
	FieldJobID       = "job_id"
	FieldType        = "type"
	FieldQueue       = "queue"
	FieldTenant      = "tenant"
	FieldResource    = "resource"
	FieldStatus      = "status"
	FieldAttempt     = "attempt"
	FieldMaxAttempts = "max_attempts"
	FieldDeliveries  = "deliveries"
	FieldDelivery    = "delivery"
	FieldConfirmed   = "confirmed"
	FieldCreatedAt   = "created_at"
	FieldUpdatedAt   = "updated_at"
	FieldStartedAt   = "started_at"
	FieldHeartbeatAt = "heartbeat_at"
	FieldFinishedAt  = "finished_at"
	FieldNotBefore   = "not_before"
	FieldPayload     = "payload"
	FieldOpKey       = "op_key"
	FieldDedup       = "dedup"
	FieldWorkerID    = "worker_id"
	FieldLeaseOwner  = "lease_owner"
	FieldFencing     = "fencing_token"
	FieldLastError   = "last_error"
	FieldResult      = "result"
	FieldCheckpoint  = "checkpoint"
	// FieldCheckpointAt is when the checkpoint was saved (unix ms).
	FieldCheckpointAt = "checkpoint_at"
	// FieldProgress (0-100) and FieldProgressNote are what the handler last reported
	// (Job.Progress); FieldProgressToken is the token of the run that reported it, FieldProgressAt
	// when (unix ms).
	FieldProgress      = "progress"
	FieldProgressNote  = "progress_note"
	FieldProgressToken = "progress_token"
	FieldProgressAt    = "progress_at"
	// FieldStartBy is the job's deadline (unix ms, 0 none): not started by then, it expires.
	FieldStartBy = "start_by"
	// FieldTimelineFolded marks a done job whose happy-path timeline the record stands for (the
	// value: the enqueuing worker); see fold.go.
	FieldTimelineFolded = "timeline_folded"
	// FieldTags are the job's tags, joined by ',' (absent: none); see tags.go.
	FieldTags = "tags"
	// FieldWorkflow is "<workflow id>:<node id>" for a node of a workflow (absent otherwise).
	FieldWorkflow = "workflow"
	// FieldFairKey is the key a job created waiting for its admission waits on (fair dispatch;
	// absent otherwise): its record stands for its waiting event (fold.go).
	FieldFairKey = "fair_key"
	// FieldCancelledRun is when a cancel took a running job's lease (unix ms; absent otherwise):
	// the run's handler may still be returning. Its fair admission is freed at the run's end, or
	// by the sweep once the run has had time to end (engine: cancelledRunGrace).
	FieldCancelledRun = "cancelled_run"
)

// recordFields lists every field above.
var recordFields = []string{FieldJobID, FieldType, FieldQueue, FieldTenant, FieldResource, FieldStatus,
	FieldAttempt, FieldMaxAttempts, FieldDeliveries, FieldDelivery, FieldConfirmed, FieldCreatedAt,
	FieldUpdatedAt, FieldStartedAt, FieldHeartbeatAt, FieldFinishedAt, FieldNotBefore, FieldStartBy, FieldPayload,
	FieldOpKey, FieldDedup, FieldWorkerID, FieldLeaseOwner, FieldFencing, FieldLastError, FieldResult,
	FieldCheckpoint, FieldCheckpointAt, FieldProgress, FieldProgressNote, FieldProgressToken, FieldProgressAt,
	FieldTimelineFolded, FieldTags, FieldWorkflow, FieldFairKey, FieldCancelledRun}

// Status is where a job is in its life (docs/DESIGN.md has the transition table).
type Status string

// The statuses.
const (
	StatusQueued     Status = "queued"
	StatusProcessing Status = "processing"
	StatusRetrying   Status = "retrying"
	StatusDone       Status = "done"
	StatusFailed     Status = "failed"
	StatusRevoked    Status = "revoked"
	// StatusCancelled: cancelled by its tenant or an operator before it ended (Store.Cancel).
	StatusCancelled Status = "cancelled"
	// StatusExpired: it waited (queued, scheduled or retrying) past its start_by, or so long that
	// its record would have outlived the retention; it never runs (scripts/expire.lua, start.lua).
	StatusExpired Status = "expired"
	// StatusHeld: a workflow node waiting for its parents; it has no delivery until its release
	// (scripts/wf_release.lua) makes it queued.
	StatusHeld Status = "held"
	// StatusSkipped: a workflow node that will never run because a parent it needed did not end
	// done (scripts/wf_skip.lua); last_error says which.
	StatusSkipped Status = "skipped"
	// StatusWaiting: a job of a fairly dispatched type waiting for its key's turn in the
	// admission layer (engine/fair.go), or admitted and delivered into asynq but not started:
	// the record stays waiting until its start (one script fewer per job).
	StatusWaiting Status = "waiting"
)

// Statuses lists every status, for metrics that must exist at zero.
var Statuses = []Status{StatusQueued, StatusProcessing, StatusRetrying, StatusDone, StatusFailed, StatusRevoked, StatusCancelled, StatusExpired, StatusHeld, StatusSkipped, StatusWaiting}

// Terminal reports whether the job has ended (until a replay).
func (s Status) Terminal() bool {
	return s == StatusDone || s == StatusFailed || s == StatusRevoked || s == StatusCancelled || s == StatusExpired ||
		s == StatusSkipped
}

// The reasons a job expires (the expired event's detail starts with one; last_error too).
const (
	// ExpiredStartBy: it had not started by its start_by.
	ExpiredStartBy = "start_by"
	// ExpiredRetention: it waited so long that its record was about to run out (JOB_RETENTION).
	ExpiredRetention = "retention"
)

// Record is a job record, typed. Times are zero when not set.
type Record struct {
	JobID, Type, Queue, Tenant, Resource string
	Status                               Status
	Attempt, MaxAttempts, Deliveries     int
	// Delivery is the asynq task id of the job's current delivery.
	Delivery string
	// Confirmed is false while the enqueue that created the job is not confirmed.
	Confirmed                                                bool
	CreatedAt, UpdatedAt, StartedAt, HeartbeatAt, FinishedAt time.Time
	NotBefore                                                time.Time
	Payload                                                  []byte
	OpKey, Dedup                                             string
	WorkerID, LeaseOwner                                     string
	FencingToken                                             int64
	LastError, Result                                        string
	Checkpoint                                               []byte
	CheckpointAt                                             time.Time
	// Progress (0-100) and ProgressNote are the last the handler reported; ProgressAt when.
	Progress     int
	ProgressNote string
	ProgressAt   time.Time
	// StartBy is the job's deadline: not started by then, it expires (zero none).
	StartBy time.Time
	// Tags are the job's tags (nil none).
	Tags []string
	// Workflow is "<workflow id>:<node id>" for a workflow's node, "" otherwise.
	Workflow string
}

// ParseRecord reads a record from its hash's fields (HGETALL).
func ParseRecord(f map[string]string) Record {
	r := Record{
		JobID: f[FieldJobID], Type: f[FieldType], Queue: f[FieldQueue], Tenant: f[FieldTenant], Resource: f[FieldResource],
		Status: Status(f[FieldStatus]), Attempt: atoi(f[FieldAttempt]), MaxAttempts: atoi(f[FieldMaxAttempts]),
		Deliveries: atoi(f[FieldDeliveries]), Delivery: f[FieldDelivery], Confirmed: f[FieldConfirmed] != "0",
		CreatedAt: stamp(f[FieldCreatedAt]), UpdatedAt: stamp(f[FieldUpdatedAt]), StartedAt: stamp(f[FieldStartedAt]),
		HeartbeatAt: stamp(f[FieldHeartbeatAt]), FinishedAt: stamp(f[FieldFinishedAt]), NotBefore: stamp(f[FieldNotBefore]),
		OpKey: f[FieldOpKey], Dedup: f[FieldDedup], WorkerID: f[FieldWorkerID], LeaseOwner: f[FieldLeaseOwner],
		FencingToken: int64(atoi(f[FieldFencing])), LastError: f[FieldLastError], Result: f[FieldResult],
		CheckpointAt: stamp(f[FieldCheckpointAt]), Progress: atoi(f[FieldProgress]), ProgressNote: f[FieldProgressNote],
		ProgressAt: stamp(f[FieldProgressAt]), StartBy: stamp(f[FieldStartBy]), Tags: splitTags(f[FieldTags]),
		Workflow: f[FieldWorkflow],
	}
	if p, ok := f[FieldPayload]; ok {
		r.Payload = []byte(p)
	}
	if c, ok := f[FieldCheckpoint]; ok && c != "" {
		r.Checkpoint = []byte(c)
	}
	return r
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// stamp reads unix ms; 0, empty or malformed is the zero time.
func stamp(ms string) time.Time {
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(n).UTC()
}
