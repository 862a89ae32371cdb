package web

import (
	"context"
	"time"
)

// Jobs is what the monitoring UI needs of the job engine and the scheduler: web knows neither
// (internal/archtest), so the app hands it this. With it the UI's task actions act on jobs
// (actions.go) and the jobs and schedules pages are served (pages.go); without it (nil) the UI is
// asynqmon alone.
type Jobs interface {
	// JobOf names the job whose delivery carries headers; "" when the task is not a jobguard delivery.
	JobOf(headers map[string]string) string
	// Job reads a job's view; nil (and no error) when it has no record.
	Job(ctx context.Context, id string) (*Job, error)
	// List reads one page of a tenant's jobs (or every tenant's), newest first. Bad search
	// values (a tag outside the rules) are an error the app's error handler answers 400.
	List(ctx context.Context, q JobQuery) (JobPage, error)
	// Cancel cancels a job that has not ended (its error maps to a status in the app's error
	// handler: no such job 404, ended 409). by and why go on the timeline.
	Cancel(ctx context.Context, id, by, why string) error
	// Replay gives a failed job a new delivery, as POST /jobs/{id}/retry does (not failed: 409).
	Replay(ctx context.Context, id string) error
	// Schedules reads the scheduler's overview.
	Schedules(ctx context.Context) (Schedules, error)
	// PauseSchedule pauses (paused true) or resumes a schedule, as POST /schedules/{name}/pause
	// and /resume do (no such schedule: an error the app's error handler answers 404).
	PauseSchedule(ctx context.Context, name string, paused bool) error
	// Workflow reads a workflow and its nodes; nil (and no error) when there is none.
	Workflow(ctx context.Context, id string) (*Workflow, error)
	// Workflows lists up to n running workflows, the newest first (ended ones are not listed).
	Workflows(ctx context.Context, n int) ([]WorkflowRow, error)
	// CancelWorkflow cancels a running workflow, as POST /workflows/{id}/cancel does (no such
	// workflow 404, ended 409 through the app's error handler).
	CancelWorkflow(ctx context.Context, id string) error
	// Fairness reads each fairly dispatched type's admission layer (none when no type is).
	Fairness(ctx context.Context) ([]FairType, error)
}

// FairType is a fairly dispatched type's admission layer as the jobs page shows it: the capacity
// that bounds its admissions now, the jobs admitted and not ended, the keys with jobs waiting, and
// the top keys by waiting and by running jobs.
type FairType struct {
	Type                            string
	Capacity, Admitted, WaitingKeys int64
	Keys                            []FairKey
}

// FairKey is one key's jobs waiting for their turn and admitted and not ended.
type FairKey struct {
	Key              string
	Waiting, Running int64
}

// Job is a job as the jobs page shows it.
type Job struct {
	ID, Type, Queue, Tenant, Resource string
	Status                            string
	// Ended: done, failed, revoked or cancelled (a cancel answers 409); Failed: a retry may replay it.
	Ended, Failed        bool
	Attempt, MaxAttempts int
	// Progress (0-100) and ProgressNote are the last a handler reported; ProgressReported is false
	// when none did (the page then shows no progress at all).
	Progress          int
	ProgressNote      string
	ProgressReported  bool
	Tags              []string
	LastError, Result string
	// Delivery is the asynq task id of the job's current delivery; Deliveries every one, oldest first.
	Delivery   string
	Deliveries []string
	// Record is the record's hash as stored, payload and checkpoint left out (their size is shown).
	Record map[string]string
	Lease  Lease
	// Timeline is oldest first.
	Timeline []Event
	// Workflow and WorkflowNode name the workflow the job is a node of ("" none).
	Workflow, WorkflowNode string
}

// Lease is the live lease of a job's resource.
type Lease struct {
	Owner     string
	Remaining time.Duration
	Fence     int64
}

// Event is one entry of a job's timeline.
type Event struct {
	At                      time.Time
	Event, Delivery, Worker string
	Detail                  string
	Token                   int64
	Attempt                 int
}

// JobQuery asks for a page of a tenant's jobs (Tenant "": every tenant's); Status, Type and Error
// (a case-insensitive substring of last_error) filter ("" all); Tags select the jobs with any of
// them (TagsMatch "any" or "") or all ("all"); CreatedAfter (inclusive) and CreatedBefore bound
// their creation (zero: no bound).
type JobQuery struct {
	Tenant, Status, Type, Cursor string
	Limit                        int
	Tags                         []string
	TagsMatch                    string
	Error                        string
	CreatedAfter, CreatedBefore  time.Time
}

// JobPage is one page of a list; Next continues it ("" after the last).
type JobPage struct {
	Jobs []JobRow
	Next string
}

// JobRow is one job of a list.
type JobRow struct {
	ID, Tenant, Type, Queue, Status string
	// Ended: a cancel answers 409; Failed: a retry may replay it.
	Ended, Failed        bool
	Attempt              int
	CreatedAt, UpdatedAt time.Time
	Tags                 []string
	LastError            string
	// Progress is the last a handler reported; ProgressReported is false when none did.
	Progress         int
	ProgressReported bool
	// Workflow is the id of the workflow the job is a node of ("" none).
	Workflow string
}

// Schedules is the scheduler's overview.
type Schedules struct {
	// Leader is the worker id of the scheduler's leader, "" when none holds its lease.
	Leader  string
	Entries []Schedule
}

// Schedule is one schedule's state.
type Schedule struct {
	Name, Spec, Type, Timezone, Overlap, CatchUp string
	NextTick                                     time.Time
	LastTick                                     time.Time // zero: no tick yet
	LastJobID, LastJobStatus                     string
	Paused                                       bool
}
