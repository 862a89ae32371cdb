package jobstore

import (
	"context"
	"fmt"
)

// ErrWorkflowClaimed: the workflow's hash is a claim, its creation not confirmed (yet). It is an
// ErrNotFound to every reader but the sweep, which must not drop its index entries: on a cluster
// they can land before the confirmation does.
var ErrWorkflowClaimed = fmt.Errorf("%w: workflow not confirmed yet", ErrNotFound)

var wfSettleScript = script("wf_settle.lua")

// What SettleWorkflow found.
const (
	// WorkflowSettledConfirmed: the confirmation had landed; the nodes are to be confirmed.
	WorkflowSettledConfirmed = "confirmed"
	// WorkflowSettledAbandoned: it was a claim and is gone now; a confirmation arriving later finds
	// it gone.
	WorkflowSettledAbandoned = "abandoned"
	// WorkflowSettledGone: there was no hash (its claim ran out).
	WorkflowSettledGone = "gone"
)

// SettleWorkflow decides workflow id whose confirmation's answer was lost (scripts/wf_settle.lua):
// atomically against the confirmation, so no clock need agree with Redis's.
func (s *Store) SettleWorkflow(ctx context.Context, id string) (string, error) {
	st, err := wfSettleScript.Run(ctx, s.rdb, []string{s.WorkflowKey(id)}).Text()
	if err != nil {
		return "", fmt.Errorf("jobstore: settle workflow %s: %w", id, err)
	}
	switch st {
	case WorkflowSettledConfirmed, WorkflowSettledAbandoned, WorkflowSettledGone:
		return st, nil
	}
	return "", replyError("wf_settle", st)
}

// WorkflowExists reports whether workflow id's hash exists (a claim, or a workflow created).
func (s *Store) WorkflowExists(ctx context.Context, id string) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.WorkflowKey(id)).Result()
	if err != nil {
		return false, fmt.Errorf("jobstore: workflow %s: %w", id, err)
	}
	return n == 1, nil
}
