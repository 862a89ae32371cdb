package httpapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/web"
)

// The monitoring UI's workflow pages read and cancel workflows through here (web knows no engine).

// Workflow reads workflow id for its page; nil when there is none.
func (m monitoringJobs) Workflow(ctx context.Context, id string) (*web.Workflow, error) {
	v, err := m.stack.WorkflowDetail(ctx, id)
	if errors.Is(err, engine.ErrWorkflowNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	w := &web.Workflow{ID: v.ID, Tenant: v.Tenant, Kind: v.Kind, Status: v.Status, CreatedAt: v.CreatedAt, FinishedAt: v.FinishedAt,
		Cancelled: v.Cancelled, Nodes: make([]web.WorkflowNode, len(v.Nodes))}
	for i, n := range v.Nodes {
		st := v.NodeStates[i]
		w.Nodes[i] = web.WorkflowNode{ID: n.ID, JobID: n.JobID, Type: st.Type, Status: string(st.Status), Policy: n.Policy,
			Parents: n.Parents, Why: n.Why, LastError: st.LastError}
	}
	return w, nil
}

// Workflows lists up to n running workflows, the newest first.
func (m monitoringJobs) Workflows(ctx context.Context, n int) ([]web.WorkflowRow, error) {
	ws, err := m.stack.RecentWorkflows(ctx, n)
	if err != nil {
		return nil, err
	}
	out := make([]web.WorkflowRow, len(ws))
	for i, w := range ws {
		out[i] = web.WorkflowRow{ID: w.ID, Tenant: w.Tenant, Kind: w.Kind, Status: w.Status, Nodes: w.Nodes, Ended: w.Ended,
			NotDone: w.NotDone, CreatedAt: w.CreatedAt}
	}
	return out, nil
}

// CancelWorkflow is the workflow page's cancel: 404 and 409 as on POST /workflows/{id}/cancel.
func (m monitoringJobs) CancelWorkflow(ctx context.Context, id string) error {
	err := m.stack.CancelWorkflow(ctx, id)
	switch {
	case errors.Is(err, engine.ErrWorkflowNotFound):
		return &problem.HTTPError{Status: http.StatusNotFound, Detail: "no workflow " + id}
	case errors.Is(err, engine.ErrWorkflowEnded):
		return &problem.HTTPError{Status: http.StatusConflict, Code: problem.CodeWorkflowEnded, Detail: "the workflow has ended: " + err.Error()}
	}
	return err
}

// workflowID is the workflow of a record's workflow field ("" for no workflow's node).
func workflowID(field string) string {
	id, _, _ := jobstore.WorkflowOf(field)
	return id
}
