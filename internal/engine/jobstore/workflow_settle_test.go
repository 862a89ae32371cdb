package jobstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// claimWorkflow writes a new workflow's hash as its creation does: a claim.
func claimWorkflow(t *testing.T, s *Store) string {
	t.Helper()
	id := NewWorkflowID(time.Now())
	pipe := s.rdb.Pipeline()
	s.QueueWorkflowCreate(bg, pipe, NewWorkflow{ID: id, Tenant: "t1", Kind: "workflow", Now: time.Now(), ClaimTTL: time.Minute,
		Nodes: []WorkflowNode{{ID: "a", JobID: NewJobID("a", time.Now())}}})
	if _, err := pipe.Exec(bg); err != nil {
		t.Fatal(err)
	}
	return id
}

func confirmWorkflow(t *testing.T, s *Store, id string) string {
	t.Helper()
	var c WorkflowConfirmation
	if _, err := s.rdb.Pipelined(bg, func(pipe redis.Pipeliner) error {
		c = s.QueueWorkflowConfirm(context.Background(), pipe, id, 0)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	st, err := c.Result()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func settleWorkflow(t *testing.T, s *Store, id string) string {
	t.Helper()
	st, err := s.SettleWorkflow(bg, id)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A settlement and a confirmation are decided by whichever reaches Redis first, whatever the
// clocks say: a claim taken back cannot be confirmed after (it was by a confirmation that landed
// past the settlement's estimate of the deadline, on a clock ahead of Redis's), and a confirmed
// workflow is kept.
func TestWorkflowSettlementFencesTheConfirmation(t *testing.T) {
	t.Parallel()
	s := newStore(t)

	taken := claimWorkflow(t, s)
	if st := settleWorkflow(t, s, taken); st != WorkflowSettledAbandoned {
		t.Fatalf("a claim's settlement: %s, want abandoned", st)
	}
	if st := confirmWorkflow(t, s, taken); st != "gone" {
		t.Fatalf("a confirmation after the settlement: %s, want gone", st)
	}
	if _, err := s.LoadWorkflow(bg, taken); err != ErrNotFound {
		t.Fatalf("the workflow taken back: %v, want ErrNotFound", err)
	}

	kept := claimWorkflow(t, s)
	if _, err := s.LoadWorkflow(bg, kept); err != ErrWorkflowClaimed {
		t.Fatalf("a claim read: %v, want ErrWorkflowClaimed", err)
	}
	if st := confirmWorkflow(t, s, kept); st != "confirmed" {
		t.Fatalf("a claim's confirmation: %s, want confirmed", st)
	}
	if st := settleWorkflow(t, s, kept); st != WorkflowSettledConfirmed {
		t.Fatalf("a confirmed workflow's settlement: %s, want confirmed", st)
	}
	// The same confirmation again (a retried send) leaves what the workflow became as it is.
	s.rdb.HSet(bg, s.WorkflowKey(kept), WfStatus, WorkflowDone)
	if st := confirmWorkflow(t, s, kept); st != "confirmed" {
		t.Fatalf("a confirmation sent again: %s, want confirmed", st)
	}
	if w, err := s.LoadWorkflow(bg, kept); err != nil || w.Status != WorkflowDone {
		t.Fatalf("the workflow after its confirmation came again: %+v %v, want done", w, err)
	}

	if st := settleWorkflow(t, s, NewWorkflowID(time.Now())); st != WorkflowSettledGone {
		t.Fatalf("no hash: %s, want gone", st)
	}
}
