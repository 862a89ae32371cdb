package web

import (
	"context"
	"net/url"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// The workflow pages: {root}/workflows (open one by id; the newest running workflows, of a
// tenant with ?tenant=), {root}/workflows/{id} (its DAG drawn with each node's status, its counts,
// the cancel button while it runs; live refresh by static/jobs.js) and {root}/workflows/{id}/cancel
// (GET: the confirmation; POST with confirm=yes: the cancel, then back to the workflow's page).
// A monitoring user sees every tenant's workflows, as on the jobs pages.

// workflowsRead is how many running workflows the list reads (newest first) before its tenant
// filter; workflowsShown how many it shows.
const (
	workflowsRead  = 500
	workflowsShown = 50
)

// workflowStatuses are the node statuses a workflow's counts show, in a run's order.
var workflowStatuses = []string{"held", "queued", "waiting", "processing", "retrying", "done", "failed", "skipped", "cancelled", "revoked", "expired"}

// knownStatus says whether a status has a colour of its own (anything else is drawn as unknown).
func knownStatus(s string) bool {
	for _, k := range workflowStatuses {
		if s == k {
			return true
		}
	}
	return false
}

// serveWorkflows answers the workflow pages' paths; handled is false for any other path.
func (p *pages) serveWorkflows(c *fiber.Ctx, path string) (handled bool, err error) {
	if path == p.root+"/workflows" || path == p.root+"/workflows/" {
		return true, p.get(c, p.workflows)
	}
	id, op, under, err := pathID(path, p.root+"/workflows/")
	if !under || err != nil {
		return under, err
	}
	switch op {
	case "":
		return true, p.get(c, func(ctx context.Context, c *fiber.Ctx) error { return p.workflow(ctx, c, id) })
	case "cancel":
		return true, p.cancelWorkflow(c, id)
	}
	return true, fiber.ErrNotFound
}

// workflows is {root}/workflows: ?id= goes to that workflow's page.
func (p *pages) workflows(ctx context.Context, c *fiber.Ctx) error {
	if id := strings.TrimSpace(c.Query("id")); id != "" {
		return c.Redirect(p.root+"/workflows/"+url.PathEscape(id), fiber.StatusSeeOther)
	}
	tenant := strings.TrimSpace(c.Query("tenant"))
	rows, err := p.jobs.Workflows(ctx, workflowsRead)
	if err != nil {
		return err
	}
	shown := make([]WorkflowRow, 0, min(len(rows), workflowsShown))
	for _, r := range rows {
		if tenant != "" && r.Tenant != tenant {
			continue
		}
		if len(shown) == workflowsShown {
			break
		}
		shown = append(shown, r)
	}
	return render(c, fiber.StatusOK, "workflows.html", map[string]any{"Root": p.root, "Tenant": tenant, "Rows": shown,
		"Read": workflowsRead, "Shown": workflowsShown, "Full": len(rows) == workflowsRead})
}

// statusCount is one status's count on a workflow's page.
type statusCount struct {
	Name string
	N    int
}

// workflow is {root}/workflows/{id}.
func (p *pages) workflow(ctx context.Context, c *fiber.Ctx, id string) error {
	w, err := p.jobs.Workflow(ctx, id)
	if ok, err := p.found(c, err, w != nil, "noworkflow.html", id); !ok {
		return err
	}
	drawing := layoutDAG(w.Nodes, func(jobID string) string { return p.root + "/jobs/" + url.PathEscape(jobID) })
	n := map[string]int{}
	var problems []dagNode
	for i, node := range w.Nodes {
		n[node.Status]++
		if node.Status != "done" && (node.Why != "" || node.LastError != "") {
			problems = append(problems, drawing.Nodes[i])
		}
	}
	var counts []statusCount
	for _, s := range workflowStatuses {
		if n[s] > 0 {
			counts = append(counts, statusCount{s, n[s]})
			delete(n, s)
		}
	}
	for s, k := range n { // a status the page does not know ("" when a record is gone)
		if s == "" {
			s = "gone"
		}
		counts = append(counts, statusCount{s, k})
	}
	running := w.Status == "running"
	refresh := 5
	if r, err := strconv.Atoi(c.Query("refresh")); err == nil && r >= 1 && r <= 300 {
		refresh = r
	}
	return renderCSP(c, fiber.StatusOK, "workflow.html", map[string]any{
		"Root": p.root, "W": w, "Drawing": drawing, "Counts": counts, "Problems": problems,
		"Running": running, "CanCancel": running && !p.readOnly, "ReadOnly": p.readOnly, "Refresh": refresh,
		"Self": p.root + "/workflows/" + url.PathEscape(w.ID),
	}, jobsCSP)
}

// cancelWorkflow is {root}/workflows/{id}/cancel: GET (or a POST without confirm=yes, as sent by
// a browser without script) is the confirmation page; a POST with confirm=yes cancels, then sends
// the browser back to the workflow's page (303). An error is the app's problem answer (404, 409).
func (p *pages) cancelWorkflow(c *fiber.Ctx, id string) error {
	if p.readOnly {
		return readOnly(c)
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), p.timeout)
	defer cancel()
	switch c.Method() {
	case fiber.MethodGet, fiber.MethodHead:
	case fiber.MethodPost:
		if c.FormValue("confirm") == "yes" {
			if err := p.jobs.CancelWorkflow(ctx, id); err != nil {
				return err
			}
			return c.Redirect(p.root+"/workflows/"+url.PathEscape(id), fiber.StatusSeeOther)
		}
	default:
		return methodNotAllowed(c, allowRead+", "+allowChange)
	}
	w, err := p.jobs.Workflow(ctx, id)
	if ok, err := p.found(c, err, w != nil, "noworkflow.html", id); !ok {
		return err
	}
	open := 0
	for _, n := range w.Nodes {
		switch n.Status {
		case "done", "failed", "skipped", "cancelled", "revoked", "expired":
		default:
			open++
		}
	}
	return render(c, fiber.StatusOK, "workflow_cancel.html", map[string]any{"Root": p.root, "W": w, "Open": open,
		"Running": w.Status == "running", "Self": p.root + "/workflows/" + url.PathEscape(w.ID)})
}
