// Package outbox is jobguard's transactional enqueue: EnqueueTx records a job in the caller's
// PostgreSQL transaction, so the job exists if and only if the transaction commits, and a Relay
// hands committed jobs to the engine. The job's id is fixed when it is recorded, and the engine
// refuses a second job with the same id, so a relay that dies between the enqueue and the row's
// delete, or two relays racing, still create each job once.
package outbox

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/sqlfence"
)

//go:embed schema.sql
var schemaSQL string

// Channel is the LISTEN/NOTIFY channel EnqueueTx notifies at commit, to wake the relay.
const Channel = "jobguard_outbox"

// Schema is the DDL of the package's table (idempotent: CREATE ... IF NOT EXISTS), for a
// migration tool; Migrate runs it.
func Schema() string { return schemaSQL }

// Migrate creates the outbox table if it is not there.
func Migrate(ctx context.Context, q sqlfence.Querier) error {
	if _, err := q.Exec(ctx, schemaSQL); err != nil {
		return fmt.Errorf("outbox: migrate: %w", err)
	}
	return nil
}

// spec is what a row holds of an engine.Spec: everything but Finally (a function) and Headers
// beyond the trace context.
type spec struct {
	Type      string            `json:"type"`
	Tenant    string            `json:"tenant,omitempty"`
	Resource  string            `json:"resource,omitempty"`
	Payload   []byte            `json:"payload,omitempty"`
	OpKey     string            `json:"op_key,omitempty"`
	Dedup     *engine.Dedup     `json:"dedup,omitempty"`
	JobID     string            `json:"job_id"`
	Headers   map[string]string `json:"headers,omitempty"`
	ProcessIn time.Duration     `json:"process_in,omitempty"`
}

func (s spec) engineSpec() engine.Spec {
	return engine.Spec{Type: s.Type, Tenant: s.Tenant, Resource: s.Resource, Payload: s.Payload, OpKey: s.OpKey,
		Dedup: s.Dedup, JobID: s.JobID, Headers: s.Headers, ProcessIn: s.ProcessIn}
}

// EnqueueTx records sp in tx and returns the job's id (sp.JobID, or a new one for its resource).
// The job is enqueued by the relay once tx commits; if tx rolls back there is no job. A Finally
// in sp is ignored: nothing runs in the request's round trip.
func EnqueueTx(ctx context.Context, tx pgx.Tx, sp engine.Spec) (string, error) {
	if sp.Type == "" {
		return "", fmt.Errorf("outbox: a job needs a type")
	}
	if sp.JobID == "" {
		resource := sp.Resource
		if resource == "" {
			resource = "outbox:" + fmt.Sprint(time.Now().UnixNano())
		}
		sp.JobID = engine.NewJobID(resource, time.Now())
	}
	if !engine.ValidJobID(sp.JobID) {
		return "", fmt.Errorf("outbox: %q is not a job id", sp.JobID)
	}
	b, err := json.Marshal(spec{Type: sp.Type, Tenant: sp.Tenant, Resource: sp.Resource, Payload: sp.Payload, OpKey: sp.OpKey,
		Dedup: sp.Dedup, JobID: sp.JobID, Headers: sp.Headers, ProcessIn: sp.ProcessIn})
	if err != nil {
		return "", fmt.Errorf("outbox: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO jobguard_outbox (job_id, spec) VALUES ($1, $2)`, sp.JobID, b); err != nil {
		return "", fmt.Errorf("outbox: record job: %w", err)
	}
	// Delivered at commit, not before: the relay wakes when the row is visible.
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, Channel, sp.JobID); err != nil {
		return "", fmt.Errorf("outbox: notify: %w", err)
	}
	return sp.JobID, nil
}
