package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// WorkflowSummary is a running workflow as the monitoring UI lists it.
type WorkflowSummary = jobstore.WorkflowSummary

// RecentWorkflows lists up to n running workflows, the newest first (two round trips). Ended
// workflows are not indexed, so they are not listed: their pages are reached by id.
func (s *Stack) RecentWorkflows(ctx context.Context, n int) ([]WorkflowSummary, error) {
	w, err := s.store.RecentWorkflows(ctx, n)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	return w, nil
}

// WorkflowDetail is a workflow and what each node's record says, for the monitoring UI.
type WorkflowDetail struct {
	jobstore.WorkflowRecord
	// Nodes' records, in the order of Nodes (Status "" when the record is gone: then the
	// workflow's note of the node's end, if any).
	NodeStates []jobstore.NodeState
}

// WorkflowDetail reads workflow id and its nodes' status, type and last error (two round trips).
func (s *Stack) WorkflowDetail(ctx context.Context, id string) (WorkflowDetail, error) {
	w, err := s.store.LoadWorkflow(ctx, id)
	if errors.Is(err, jobstore.ErrNotFound) || errors.Is(err, jobstore.ErrInvalidWorkflowID) {
		return WorkflowDetail{}, fmt.Errorf("%w: %s", ErrWorkflowNotFound, id)
	}
	if err != nil {
		return WorkflowDetail{}, fmt.Errorf("engine: %w", err)
	}
	ids := make([]string, len(w.Nodes))
	for i, n := range w.Nodes {
		ids[i] = n.JobID
	}
	st, err := s.store.NodeStates(ctx, ids)
	if err != nil {
		return WorkflowDetail{}, fmt.Errorf("engine: %w", err)
	}
	for i, n := range w.Nodes {
		if st[i].Status == "" && n.Ended != "" {
			st[i].Status = n.Ended
		}
	}
	return WorkflowDetail{WorkflowRecord: w, NodeStates: st}, nil
}
