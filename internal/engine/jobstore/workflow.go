package jobstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A workflow is a hash in a slot of its own, <prefix>:{wf:<id>}:wf, beside its nodes' job records
// (each in its resource's slot). The hash holds the workflow's fields and, per node, the fields
// named by the Wf... prefixes and the node's id. Every script that touches it touches it alone,
// so the workflow's keys never need a slot in common with a job's. Running workflows are also in
// the index <prefix>:{workflows} (score: creation, unix ms), which the sweeper reads.

// The workflow hash's fields.
const (
	WfTenant     = "tenant"
	WfKind       = "kind" // "workflow" or "batch"
	WfStatus     = "status"
	WfCreatedAt  = "created_at"
	WfFinishedAt = "finished_at"
	WfNodes      = "nodes"     // how many nodes
	WfEnded      = "ended"     // how many nodes have ended (and were told to wf_ended)
	WfNotDone    = "notdone"   // how many of those did not end done
	WfCancelled  = "cancelled" // "1" once the workflow was cancelled
	WfOrder      = "order"     // the node ids, comma-separated, in the creation's order
	// Per node: the field is the prefix then the node's id.
	WfJob      = "j:"   // its job id
	WfParents  = "par:" // its parents, comma-separated
	WfChildren = "c:"   // its children, comma-separated
	WfPolicy   = "pol:" // its policy (all_done when absent)
	WfPending  = "p:"   // how many of its parents have not ended
	WfBad      = "b:"   // how many of its parents ended other than done
	WfWhy      = "why:" // the first parent that ended other than done, and how
	WfEnd      = "e:"   // its job's terminal status, once told
	WfEndSeq   = "n:"   // when it was told: 1 for the first node told, 2 for the next, ...
)

// Workflow statuses.
const (
	WorkflowCreating  = "creating" // a claim: its creation has not been confirmed
	WorkflowRunning   = "running"
	WorkflowDone      = "done"
	WorkflowFailed    = "failed"
	WorkflowCancelled = "cancelled"
)

// Policies of a workflow node.
const (
	PolicyAllDone  = "all_done"  // released when every parent ended done; skipped otherwise
	PolicyAllEnded = "all_ended" // released when every parent ended, however
)

// ErrInvalidWorkflowID: the string is not a workflow id.
var ErrInvalidWorkflowID = errors.New("jobstore: invalid workflow id")

var workflowIDRe = regexp.MustCompile(WorkflowIDPattern)

// WorkflowIDPattern is the regular expression every workflow (and batch) id matches.
const WorkflowIDPattern = `^wf-[0-9a-f]{28}$`

// NewWorkflowID returns a fresh workflow id: "wf-", 12 hex digits of milliseconds since the
// epoch, 16 random hex digits.
func NewWorkflowID(now time.Time) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return fmt.Sprintf("wf-%012x%016x", uint64(now.UnixMilli())&0xffffffffffff, binary.BigEndian.Uint64(b[:]))
}

// ValidWorkflowID reports whether id has the form of a workflow id.
func ValidWorkflowID(id string) bool { return workflowIDRe.MatchString(id) }

// WorkflowKey is the hash of workflow id.
func (s *Store) WorkflowKey(id string) string { return s.locks.Key("wf:"+id, "wf") }

// WorkflowIndexKey is the index of running workflows.
func (s *Store) WorkflowIndexKey() string { return s.locks.Tag("workflows") }

// WorkflowNode is one node as the creation writes it.
type WorkflowNode struct {
	ID, JobID, Policy string
	Parents, Children []string
}

// NewWorkflow is what QueueWorkflowCreate writes.
type NewWorkflow struct {
	ID, Tenant, Kind string
	Nodes            []WorkflowNode
	Now              time.Time
	// ClaimTTL is how long the hash lives until its confirmation.
	ClaimTTL time.Duration
}

// QueueWorkflowCreate adds the new workflow's hash to pipe, as a claim (status creating, kept for
// ClaimTTL) until QueueWorkflowConfirm. Plain commands, in chunks: a workflow of 1,000 nodes is
// more fields than a script may unpack.
func (s *Store) QueueWorkflowCreate(ctx context.Context, pipe redis.Pipeliner, w NewWorkflow) {
	key := s.WorkflowKey(w.ID)
	order := make([]string, len(w.Nodes))
	for i, n := range w.Nodes {
		order[i] = n.ID
	}
	fields := []any{WfTenant, w.Tenant, WfKind, w.Kind, WfStatus, WorkflowCreating, WfCreatedAt, w.Now.UnixMilli(),
		WfNodes, len(w.Nodes), WfEnded, 0, WfNotDone, 0, WfOrder, strings.Join(order, ",")}
	for _, n := range w.Nodes {
		fields = append(fields, WfJob+n.ID, n.JobID, WfPending+n.ID, len(n.Parents))
		if len(n.Parents) > 0 {
			fields = append(fields, WfParents+n.ID, strings.Join(n.Parents, ","))
		}
		if len(n.Children) > 0 {
			fields = append(fields, WfChildren+n.ID, strings.Join(n.Children, ","))
		}
		if n.Policy != "" && n.Policy != PolicyAllDone {
			fields = append(fields, WfPolicy+n.ID, n.Policy)
		}
		if len(fields) >= 2000 {
			pipe.HSet(ctx, key, fields...)
			fields = fields[:0]
		}
	}
	if len(fields) > 0 {
		pipe.HSet(ctx, key, fields...)
	}
	pipe.PExpire(ctx, key, w.ClaimTTL)
}

// WorkflowConfirmation is a confirmation queued in a pipeline; Result reads it once it ran.
type WorkflowConfirmation struct{ cmd *redis.Cmd }

// Result is the confirmation's state: "confirmed", "expired" (past the deadline: nothing written)
// or "gone".
func (c WorkflowConfirmation) Result() (string, error) {
	st, err := c.cmd.Text()
	if err != nil {
		return "", fmt.Errorf("jobstore: confirm workflow: %w", err)
	}
	switch st {
	case "confirmed", "expired", "gone":
		return st, nil
	}
	return "", replyError("wf_confirm", st)
}

// QueueWorkflowConfirm adds to pipe the confirmation of workflow id (kept for the retention,
// status running). Eval keeps the pipeline free of NOSCRIPT retries.
func (s *Store) QueueWorkflowConfirm(ctx context.Context, pipe redis.Pipeliner, id string, deadline int64) WorkflowConfirmation {
	return WorkflowConfirmation{wfConfirmScript.Eval(ctx, pipe, []string{s.WorkflowKey(id)}, deadline, ms(s.cfg.Retention))}
}

// WorkflowEntries are a new workflow's entries queued in a pipeline; Err reads them once it ran.
type WorkflowEntries struct{ cmds []redis.Cmder }

// Err is the first entry's error, nil when every one was written.
func (e WorkflowEntries) Err() error {
	for _, c := range e.cmds {
		if err := c.Err(); err != nil {
			return fmt.Errorf("jobstore: index workflow: %w", err)
		}
	}
	return nil
}

// QueueWorkflowEntries adds to pipe a new workflow's entries, written with its claim, before its
// confirmation: in the index of running workflows, and in the set of workflows whose nodes are not
// confirmed yet (the sweep reads that one first: WorkflowsUnconfirmed). On a cluster they live on
// another master than the hash; written after the confirmation, in its round trip, a failover of
// that master could lose them while the confirmation took, and nothing would confirm nodes a
// failure left unconfirmed. The sweep leaves a claim's entries alone and drops them once the hash
// is gone (its claim ran out, or a settlement took it back); ForgetWorkflowEntries drops them at
// once.
func (s *Store) QueueWorkflowEntries(ctx context.Context, pipe redis.Pipeliner, id string, now time.Time) WorkflowEntries {
	z := redis.Z{Score: float64(now.UnixMilli()), Member: id}
	return WorkflowEntries{cmds: []redis.Cmder{
		pipe.ZAdd(ctx, s.WorkflowIndexKey(), z),
		pipe.PExpire(ctx, s.WorkflowIndexKey(), s.cfg.Retention),
		pipe.ZAdd(ctx, s.workflowUnconfirmedKey(), z),
	}}
}

// ForgetWorkflowEntries takes workflow id out of the index and of the set of workflows whose nodes
// are not confirmed: it was never created.
func (s *Store) ForgetWorkflowEntries(ctx context.Context, id string) error {
	pipe := s.rdb.Pipeline()
	pipe.ZRem(ctx, s.WorkflowIndexKey(), id)
	pipe.ZRem(ctx, s.workflowUnconfirmedKey(), id)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("jobstore: workflow %s: %w", id, err)
	}
	return nil
}

// workflowUnconfirmedKey is the set of workflows confirmed (or being confirmed) whose nodes'
// records are not all confirmed yet, by creation time: live data, an entry leaves once they are.
func (s *Store) workflowUnconfirmedKey() string { return s.locks.Key("workflows", "nodes-unconfirmed") }

// WorkflowsUnconfirmed lists up to n workflows whose nodes may not all be confirmed, the oldest
// first.
func (s *Store) WorkflowsUnconfirmed(ctx context.Context, n int) ([]string, error) {
	ids, err := s.rdb.ZRange(ctx, s.workflowUnconfirmedKey(), 0, int64(n-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: read the unconfirmed workflows: %w", err)
	}
	return ids, nil
}

// NodesConfirmed takes workflow id out of the set of workflows whose nodes are not confirmed.
func (s *Store) NodesConfirmed(ctx context.Context, id string) error {
	if err := s.rdb.ZRem(ctx, s.workflowUnconfirmedKey(), id).Err(); err != nil {
		return fmt.Errorf("jobstore: workflow %s: %w", id, err)
	}
	return nil
}

// UnindexWorkflow takes workflow id out of the index of running workflows (it ended, or is gone).
func (s *Store) UnindexWorkflow(ctx context.Context, id string) error {
	if err := s.rdb.ZRem(ctx, s.WorkflowIndexKey(), id).Err(); err != nil {
		return fmt.Errorf("jobstore: unindex workflow %s: %w", id, err)
	}
	return nil
}

// RunningWorkflows lists up to n workflows of the index, the oldest first.
func (s *Store) RunningWorkflows(ctx context.Context, n int) ([]string, error) {
	ids, err := s.rdb.ZRange(ctx, s.WorkflowIndexKey(), 0, int64(n-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: read the workflow index: %w", err)
	}
	return ids, nil
}

// WorkflowDecision is what wf_ended decided for a child whose parents have all ended.
type WorkflowDecision struct {
	Node, JobID string
	// Action is "release" or "skip"; Why says which parent made it a skip.
	Action, Why string
}

// WorkflowAdvance is wf_ended's answer.
type WorkflowAdvance struct {
	// State: "advanced", "noted" (told before: nothing written), "unknown" (no such node),
	// "gone" (no workflow).
	State string
	// Status is the workflow's after the script.
	Status    string
	Decisions []WorkflowDecision
}

// WorkflowEnded tells workflow id that node ended with status st (scripts/wf_ended.lua): once per
// node, each child's pending-parent count goes down, and those whose count reached 0 are decided.
func (s *Store) WorkflowEnded(ctx context.Context, id, node string, st Status, now time.Time) (WorkflowAdvance, error) {
	res, err := wfEndedScript.Run(ctx, s.rdb, []string{s.WorkflowKey(id)}, node, string(st), now.UnixMilli(), ms(s.cfg.Retention)).Result()
	if err != nil {
		return WorkflowAdvance{}, fmt.Errorf("jobstore: workflow %s: node %s ended: %w", id, node, err)
	}
	r, err := replyStrings("wf_ended", res, 2)
	if err != nil {
		return WorkflowAdvance{}, err
	}
	a := WorkflowAdvance{State: r[0], Status: r[1]}
	switch a.State {
	case "gone", "unknown", "noted":
		return a, nil
	case "advanced":
	default:
		return WorkflowAdvance{}, replyError("wf_ended", res)
	}
	if (len(r)-2)%4 != 0 {
		return WorkflowAdvance{}, replyError("wf_ended", res)
	}
	for i := 2; i < len(r); i += 4 {
		a.Decisions = append(a.Decisions, WorkflowDecision{Node: r[i], JobID: r[i+1], Action: r[i+2], Why: r[i+3]})
	}
	return a, nil
}

// Released is what a release found.
type Released struct {
	// Released: the node was held and is queued now; the caller delivers it. Otherwise Status is
	// what it was ("" when its record is gone).
	Released bool
	Status   Status
	// What the delivery needs of the record.
	Type, Tenant, Resource, OpKey string
	Payload                       []byte
}

// ReleaseInfo is what a release reads of a node's record before its delivery: the status ("" when
// the record is gone) and what the delivery needs.
type ReleaseInfo struct {
	Status                        Status
	Type, Tenant, Resource, OpKey string
	Payload                       []byte
	// Queue is the asynq queue the record names (its shard, when its queue is sharded).
	Queue string
}

// ReleaseInfo reads node job id's record for its release, in one round trip.
func (s *Store) ReleaseInfo(ctx context.Context, id string) (ReleaseInfo, error) {
	k, err := s.Keys(id, "")
	if err != nil {
		return ReleaseInfo{}, err
	}
	v, err := s.rdb.HMGet(ctx, k.Record, FieldStatus, FieldType, FieldTenant, FieldResource, FieldOpKey, FieldPayload, FieldQueue).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return ReleaseInfo{}, fmt.Errorf("jobstore: read node %s: %w", id, err)
	}
	str := func(i int) string { s, _ := v[i].(string); return s }
	return ReleaseInfo{Status: Status(str(0)), Type: str(1), Tenant: str(2), Resource: str(3), OpKey: str(4), Payload: []byte(str(5)), Queue: str(6)}, nil
}

// ReleaseNode makes held node job id queued, or waiting (a fairly dispatched type's node, which
// waits for its key), once (scripts/wf_release.lua).
func (s *Store) ReleaseNode(ctx context.Context, id string, now time.Time, waiting bool) (Released, error) {
	k, err := s.Keys(id, "")
	if err != nil {
		return Released{}, err
	}
	status := StatusQueued
	if waiting {
		status = StatusWaiting
	}
	res, err := wfReleaseScript.Run(ctx, s.rdb, []string{k.Record, k.Timeline}, now.UnixMilli(), ms(s.cfg.Retention),
		s.cfg.TimelineCap, s.cfg.WorkerID, string(status)).Result()
	if err != nil {
		return Released{}, fmt.Errorf("jobstore: release %s: %w", id, err)
	}
	r, err := replyStrings("wf_release", res, 1)
	if err != nil {
		return Released{}, err
	}
	switch {
	case r[0] == "gone":
		return Released{}, nil
	case r[0] == "not_held" && len(r) == 2:
		return Released{Status: Status(r[1])}, nil
	case r[0] == "released" && len(r) == 6:
		return Released{Released: true, Status: status, Type: r[1], Tenant: r[2], Resource: r[3], OpKey: r[4], Payload: []byte(r[5])}, nil
	}
	return Released{}, replyError("wf_release", res)
}

// SkipNode ends held node job id skipped (scripts/wf_skip.lua), once; it reports whether it did,
// and otherwise the status the node had ("" when its record is gone).
func (s *Store) SkipNode(ctx context.Context, id, why string, now time.Time) (bool, Status, error) {
	k, err := s.Keys(id, "")
	if err != nil {
		return false, "", err
	}
	res, err := wfSkipScript.Run(ctx, s.rdb, []string{k.Record, k.Timeline}, now.UnixMilli(), ms(s.cfg.Retention),
		s.cfg.TimelineCap, s.cfg.WorkerID, why).Result()
	if err != nil {
		return false, "", fmt.Errorf("jobstore: skip %s: %w", id, err)
	}
	r, err := replyStrings("wf_skip", res, 1)
	if err != nil {
		return false, "", err
	}
	switch {
	case r[0] == "skipped":
		return true, StatusSkipped, nil
	case r[0] == "gone":
		return false, "", nil
	case r[0] == "not_held" && len(r) == 2:
		return false, Status(r[1]), nil
	}
	return false, "", replyError("wf_skip", res)
}

// MarkWorkflowCancelled marks running workflow id cancelled (scripts/wf_cancel.lua): no node is
// released or skipped from then on. It returns "cancelling" and the node ids, "gone", or
// "ended" and the workflow's status.
func (s *Store) MarkWorkflowCancelled(ctx context.Context, id string) (string, []string, error) {
	res, err := wfCancelScript.Run(ctx, s.rdb, []string{s.WorkflowKey(id)}, ms(s.cfg.Retention)).Result()
	if err != nil {
		return "", nil, fmt.Errorf("jobstore: cancel workflow %s: %w", id, err)
	}
	r, err := replyStrings("wf_cancel", res, 1)
	if err != nil {
		return "", nil, err
	}
	switch {
	case r[0] == "gone":
		return r[0], nil, nil
	case r[0] == "ended" && len(r) == 2:
		return r[0], []string{r[1]}, nil
	case r[0] == "cancelling" && len(r) == 2:
		return r[0], splitList(r[1]), nil
	}
	return "", nil, replyError("wf_cancel", res)
}

// WorkflowRecord is a workflow's hash, typed.
type WorkflowRecord struct {
	ID, Tenant, Kind, Status string
	CreatedAt, FinishedAt    time.Time
	Cancelled                bool
	Ended, NotDone           int
	Nodes                    []WorkflowNodeState
}

// WorkflowNodeState is one node as the hash says.
type WorkflowNodeState struct {
	ID, JobID, Policy string
	Parents           []string
	// Pending is how many parents have not ended; Ended the node's status once told ("" before).
	Pending int
	Ended   Status
	// EndSeq numbers the node's end among the workflow's (1 first; 0 before it ended, or for an
	// end told before the field was written).
	EndSeq int
	// Why is the first parent that ended other than done, and how.
	Why string
}

// LoadWorkflow reads workflow id; ErrNotFound when there is none (or it is still a claim).
func (s *Store) LoadWorkflow(ctx context.Context, id string) (WorkflowRecord, error) {
	if !ValidWorkflowID(id) {
		return WorkflowRecord{}, fmt.Errorf("%w: %q", ErrInvalidWorkflowID, id)
	}
	f, err := s.rdb.HGetAll(ctx, s.WorkflowKey(id)).Result()
	if err != nil {
		return WorkflowRecord{}, fmt.Errorf("jobstore: read workflow %s: %w", id, err)
	}
	if len(f) == 0 {
		return WorkflowRecord{}, ErrNotFound
	}
	if f[WfStatus] == WorkflowCreating {
		return WorkflowRecord{}, ErrWorkflowClaimed
	}
	w := WorkflowRecord{ID: id, Tenant: f[WfTenant], Kind: f[WfKind], Status: f[WfStatus], CreatedAt: stamp(f[WfCreatedAt]),
		FinishedAt: stamp(f[WfFinishedAt]), Cancelled: f[WfCancelled] == "1", Ended: atoi(f[WfEnded]), NotDone: atoi(f[WfNotDone])}
	for _, n := range splitList(f[WfOrder]) {
		pol := f[WfPolicy+n]
		if pol == "" {
			pol = PolicyAllDone
		}
		w.Nodes = append(w.Nodes, WorkflowNodeState{ID: n, JobID: f[WfJob+n], Policy: pol, Parents: splitList(f[WfParents+n]),
			Pending: atoi(f[WfPending+n]), Ended: Status(f[WfEnd+n]), EndSeq: atoi(f[WfEndSeq+n]), Why: f[WfWhy+n]})
	}
	return w, nil
}

// Statuses reads the status of each job id in one round trip ("" for a record that is gone).
func (s *Store) Statuses(ctx context.Context, ids []string) ([]Status, error) {
	rows, err := s.recordFields(ctx, "statuses", ids, FieldStatus)
	if err != nil {
		return nil, err
	}
	out := make([]Status, len(ids))
	for i, r := range rows {
		out[i] = Status(r[0])
	}
	return out, nil
}

// NodeRecord is what the workflow sweep reads of a node's record: its status ("" when the record
// is gone), whether it is confirmed, and its tags (to index it when the sweep confirms it).
type NodeRecord struct {
	Status    Status
	Confirmed bool
	Tags      []string
}

// NodeRecords reads the record of each job id in one round trip.
func (s *Store) NodeRecords(ctx context.Context, ids []string) ([]NodeRecord, error) {
	rows, err := s.recordFields(ctx, "node records", ids, FieldStatus, FieldConfirmed, FieldTags)
	if err != nil {
		return nil, err
	}
	out := make([]NodeRecord, len(ids))
	for i, r := range rows {
		// A final record leaves "confirmed" out (it is derived: record_compact in prelude.lua).
		out[i] = NodeRecord{Status: Status(r[0]), Confirmed: r[1] != "0", Tags: splitTags(r[2])}
	}
	return out, nil
}

// NodeResult is a workflow node's job as its children read it.
type NodeResult struct {
	JobID  string
	Status Status
	Result string
}

// NodeResults reads the status and result of each job id in one round trip.
func (s *Store) NodeResults(ctx context.Context, ids []string) ([]NodeResult, error) {
	rows, err := s.recordFields(ctx, "results", ids, FieldStatus, FieldResult)
	if err != nil {
		return nil, err
	}
	out := make([]NodeResult, len(ids))
	for i, r := range rows {
		out[i] = NodeResult{JobID: ids[i], Status: Status(r[0]), Result: r[1]}
	}
	return out, nil
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// WorkflowOf splits a record's FieldWorkflow into the workflow's id and the node's.
func WorkflowOf(field string) (id, node string, ok bool) {
	id, node, ok = strings.Cut(field, ":")
	return id, node, ok && ValidWorkflowID(id) && node != ""
}
