package cli

import "time"

// The API's answers, as far as the CLI reads them (docs/HTTP_API.md is the contract). Unknown
// members are ignored, so a newer server's additions do not break an older CLI; --output json
// prints the answer as the API sent it.

// listPage is GET /jobs.
type listPage struct {
	Jobs       []listedJob `json:"jobs"`
	NextCursor string      `json:"next_cursor"`
}

type listedJob struct {
	JobID     string     `json:"job_id"`
	Tenant    string     `json:"tenant"` // absent from servers older than the every-tenant list
	Type      string     `json:"type"`
	Queue     string     `json:"queue"`
	Status    string     `json:"status"`
	Attempt   int        `json:"attempt"`
	CreatedAt *time.Time `json:"created_at"`
	UpdatedAt *time.Time `json:"updated_at"`
	Tags      []string   `json:"tags"`
}

// jobView is GET /jobs/{id}.
type jobView struct {
	JobID        string         `json:"job_id"`
	Type         string         `json:"type"`
	Queue        string         `json:"queue"`
	Tenant       string         `json:"tenant"`
	Resource     string         `json:"resource"`
	Status       string         `json:"status"`
	Attempt      int64          `json:"attempt"`
	MaxAttempts  int64          `json:"max_attempts"`
	WorkerID     string         `json:"worker_id"`
	Fencing      int64          `json:"fencing_token"`
	CreatedAt    *time.Time     `json:"created_at"`
	StartedAt    *time.Time     `json:"started_at"`
	UpdatedAt    *time.Time     `json:"updated_at"`
	FinishedAt   *time.Time     `json:"finished_at"`
	StartBy      *time.Time     `json:"start_by"`
	Tags         []string       `json:"tags"`
	LastError    string         `json:"last_error"`
	Result       string         `json:"result"`
	Progress     int            `json:"progress"`
	ProgressNote string         `json:"progress_note"`
	Lease        leaseView      `json:"lease"`
	Deliveries   []deliveryView `json:"deliveries"`
	Timeline     []event        `json:"timeline"`
}

type leaseView struct {
	Owner        string `json:"owner"`
	RemainingMS  int64  `json:"remaining_ttl_ms"`
	CurrentFence int64  `json:"current_fence"`
}

type deliveryView struct {
	TaskID  string `json:"task_id"`
	Queue   string `json:"queue"`
	Current bool   `json:"current"`
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
