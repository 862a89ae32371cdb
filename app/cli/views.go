package cli

import (
	"fmt"
	"time"
)

// The API's answers, as far as the CLI reads them (docs/HTTP_API.md is the contract). Unknown
// members are ignored, so a newer server's additions do not break an older CLI; --output json
// prints the answer as the API sent it.

// listPage is GET /jobs.
type listPage struct {
	Jobs       []listedJob `json:"jobs"`
	NextCursor string      `json:"next_cursor"`
}

// jobHead is what a listed job (GET /jobs) and a job's view (GET /jobs/{id}) both say of it.
type jobHead struct {
	JobID     string     `json:"job_id"`
	Tenant    string     `json:"tenant"` // a listed job's is absent from servers older than the every-tenant list
	Type      string     `json:"type"`
	Queue     string     `json:"queue"`
	Status    string     `json:"status"`
	CreatedAt *time.Time `json:"created_at"`
	UpdatedAt *time.Time `json:"updated_at"`
	Tags      []string   `json:"tags"`
}

type listedJob struct {
	jobHead
	Attempt int `json:"attempt"`
}

// jobView is GET /jobs/{id}.
type jobView struct {
	jobHead
	Resource     string     `json:"resource"`
	Attempt      int64      `json:"attempt"`
	MaxAttempts  int64      `json:"max_attempts"`
	WorkerID     string     `json:"worker_id"`
	Fencing      int64      `json:"fencing_token"`
	StartedAt    *time.Time `json:"started_at"`
	FinishedAt   *time.Time `json:"finished_at"`
	StartBy      *time.Time `json:"start_by"`
	LastError    string     `json:"last_error"`
	Result       string     `json:"result"`
	Progress     int        `json:"progress"`
	ProgressNote string     `json:"progress_note"`
	Lease        lease      `json:"lease"`
	Deliveries   []delivery `json:"deliveries"`
	Timeline     []event    `json:"timeline"`
}

// lease is a job view's lease; String is show's line for it.
type lease struct {
	Owner        string `json:"owner"`
	RemainingMS  int64  `json:"remaining_ttl_ms"`
	CurrentFence int64  `json:"current_fence"`
}

func (l lease) String() string {
	if l.Owner == "" {
		return fmt.Sprintf("none (fence %d)", l.CurrentFence)
	}
	left := time.Duration(l.RemainingMS) * time.Millisecond
	return fmt.Sprintf("%s, %s left, fence %d", l.Owner, left, l.CurrentFence)
}

// delivery is an asynq task of the job; String is show's line for it.
type delivery struct {
	TaskID  string `json:"task_id"`
	Queue   string `json:"queue"`
	Current bool   `json:"current"`
}

func (d delivery) String() string {
	if d.Current {
		return d.TaskID + " in " + d.Queue + " (current)"
	}
	return d.TaskID + " in " + d.Queue
}

// event is an entry of a job's timeline; At is Unix milliseconds.
type event struct {
	At       int64  `json:"at"`
	Event    string `json:"event"`
	Delivery string `json:"delivery"`
	Detail   string `json:"detail"`
}

// cancelAnswer is POST /jobs/{id}/cancel's 200.
type cancelAnswer struct {
	JobID           string `json:"job_id"`
	Status          string `json:"status"`
	Was             string `json:"was"`
	DeliveryDeleted bool   `json:"delivery_deleted"`
}

// jobAnswer is POST /jobs/{id}/retry's 202.
type jobAnswer struct {
	JobID  string `json:"job_id"`
	Status string `json:"status"`
}
