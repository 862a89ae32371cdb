package engine

import (
	"context"
	"strings"

	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// A node's record is created unconfirmed with its workflow's claim, and lives the claim plus
// workflowNodeGrace (2 minutes) so that the sweep can confirm it after the workflow's decision.
// When the workflow is never created (a creation that failed and whose abandon did not reach
// Redis: a stall, a process death), a root's delivery used to bounce as unconfirmed until the
// record ran out, and a fair type's root held its place of the capacity as long: a probe saw a
// whole fair type stop for 2 minutes after one failed creation. A delivery that finds its node
// unconfirmed and its workflow's hash gone (its claim ran out, or a settlement took it back)
// abandons the node instead: that workflow can no longer be confirmed.

// abandonOrphanNode abandons job id, a node of workflow (its delivery's "<workflow id>:<node>"
// header) whose start found it unconfirmed, when the workflow's hash is gone; true when it did.
func (s *Stack) abandonOrphanNode(ctx context.Context, keys jobstore.Keys, id, workflow string, log zerolog.Logger) bool {
	wfID, _, ok := strings.Cut(workflow, ":")
	if !ok || !jobstore.ValidWorkflowID(wfID) {
		return false
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	defer cancel()
	exists, err := s.store.WorkflowExists(ctx, wfID)
	if err != nil || exists {
		return false // confirmed, or still a claim: the sweep confirms it, or its claim runs out
	}
	removed, err := s.store.AbandonUnconfirmed(ctx, keys, id)
	if err != nil || !removed {
		return false // confirmed meanwhile (the sweep): it runs at its next delivery
	}
	log.Info().Str("workflow_id", wfID).Str("event", "orphan_node_abandoned").
		Msg("a node of a workflow never created was abandoned at its delivery")
	return true
}
