package web

import "time"

// Workflow is a workflow as its page shows it.
type Workflow struct {
	ID, Tenant, Kind, Status string
	CreatedAt, FinishedAt    time.Time // FinishedAt zero while it runs
	Cancelled                bool
	// Nodes in the creation's order.
	Nodes []WorkflowNode
}

// WorkflowNode is one node of a workflow: its job's status ("" when the record is gone and the
// workflow noted no end), type and last error, and why it was skipped (Why: the first parent that
// ended other than done).
type WorkflowNode struct {
	ID, JobID, Type, Status, Policy string
	Parents                         []string
	Why, LastError                  string
}

// WorkflowRow is a running workflow in the list.
type WorkflowRow struct {
	ID, Tenant, Kind, Status string
	Nodes, Ended, NotDone    int
	CreatedAt                time.Time
}
