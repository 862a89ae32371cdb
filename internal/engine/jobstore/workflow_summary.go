package jobstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// What the monitoring UI reads of workflows: the newest running ones (the index and a few fields
// of each hash) and, for one workflow's page, what each node's record says.

// WorkflowSummary is a workflow as a list shows it.
type WorkflowSummary struct {
	ID, Tenant, Kind, Status string
	Nodes, Ended, NotDone    int
	CreatedAt                time.Time
}

// summaryFields are what RecentWorkflows reads of each hash, in WorkflowSummary's order.
var summaryFields = []string{WfTenant, WfKind, WfStatus, WfNodes, WfEnded, WfNotDone, WfCreatedAt}

// RecentWorkflows reads up to n running workflows of the index, the newest first, in two round
// trips (the index, then the hashes in one pipeline). A workflow that ended or went between the
// two is left out.
func (s *Store) RecentWorkflows(ctx context.Context, n int) ([]WorkflowSummary, error) {
	ids, err := s.rdb.ZRevRange(ctx, s.WorkflowIndexKey(), 0, int64(n-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: read the workflow index: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, 0, len(ids))
	valid := ids[:0]
	for _, id := range ids {
		if ValidWorkflowID(id) {
			valid = append(valid, id)
			cmds = append(cmds, pipe.HMGet(ctx, s.WorkflowKey(id), summaryFields...))
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("jobstore: read workflows: %w", err)
	}
	out := make([]WorkflowSummary, 0, len(valid))
	for i, c := range cmds {
		v := c.Val()
		if len(v) != len(summaryFields) {
			continue
		}
		str := func(k int) string { s, _ := v[k].(string); return s }
		w := WorkflowSummary{ID: valid[i], Tenant: str(0), Kind: str(1), Status: str(2), Nodes: atoi(str(3)), Ended: atoi(str(4)),
			NotDone: atoi(str(5)), CreatedAt: stamp(str(6))}
		if w.Status != WorkflowRunning {
			continue // still a claim, ended, or gone
		}
		out = append(out, w)
	}
	return out, nil
}

// NodeState is what a workflow's page shows of a node's record ("" fields when it is gone).
type NodeState struct {
	Status          Status
	Type, LastError string
}

// NodeStates reads the status, type and last error of each job id in one round trip.
func (s *Store) NodeStates(ctx context.Context, ids []string) ([]NodeState, error) {
	rows, err := s.recordFields(ctx, "nodes", ids, FieldStatus, FieldType, FieldLastError)
	if err != nil {
		return nil, err
	}
	out := make([]NodeState, len(ids))
	for i, r := range rows {
		out[i] = NodeState{Status: Status(r[0]), Type: r[1], LastError: r[2]}
	}
	return out, nil
}
