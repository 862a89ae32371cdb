package httpapi

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/app/problem"
)

func rebuildNode(id, resource string, parents ...string) string {
	ps, _ := json.Marshal(parents)
	if parents == nil {
		ps = []byte("[]")
	}
	return fmt.Sprintf(`{"id":%q,"type":"rebuild-cache","payload":{"tenant_id":"t1","resource_id":%q},"parents":%s}`, id, resource, ps)
}

func workflowBody(nodes ...string) string {
	return `{"tenant_id":"t1","nodes":[` + strings.Join(nodes, ",") + `]}`
}

func waitWorkflowView(t *testing.T, r *running, id, status string, header ...string) workflowView {
	t.Helper()
	var v workflowView
	deadline := time.Now().Add(15 * time.Second)
	for {
		v = workflowView{}
		code := getJSON(t, r, "/workflows/"+id, &v, header...)
		if code == 200 && v.Status == status {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("workflow %s not %s: %d %+v", id, status, code, v)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// POST /workflows runs a diamond end to end (each node once, after its parents); GET shows every
// node done; the events stream ends with the workflow's status; another tenant's workflow is 404;
// the same Idempotency-Key gives the same workflow back.
func TestWorkflowEndpoints(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAll, twoTenants)
	body := workflowBody(rebuildNode("a", "r-a"), rebuildNode("b", "r-b", "a"), rebuildNode("c", "r-c", "a"), rebuildNode("d", "r-d", "b", "c"))
	h := append(bearer(tokenA), "Idempotency-Key", `"wf-1"`)
	resp, out := post(t, r, "/workflows", body, h...)
	var created workflowCreated
	if err := json.Unmarshal([]byte(out), &created); err != nil || resp.StatusCode != 202 || len(created.Nodes) != 4 ||
		resp.Header.Get("Location") != "/workflows/"+created.WorkflowID {
		t.Fatalf("create: %d %s", resp.StatusCode, out)
	}
	resp, again := post(t, r, "/workflows", body, h...)
	if resp.StatusCode != 202 || again != out || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the same Idempotency-Key: %d %s", resp.StatusCode, again)
	}
	resp, _ = post(t, r, "/workflows", workflowBody(rebuildNode("a", "r-a")), h...)
	if resp.StatusCode != 422 {
		t.Fatalf("the same Idempotency-Key with another body: %d", resp.StatusCode)
	}
	v := waitWorkflowView(t, r, created.WorkflowID, "done", bearer(tokenA)...)
	for _, n := range v.Nodes {
		if n.Status != "done" || n.JobID != created.Nodes[n.ID] {
			t.Fatalf("node %+v", n)
		}
	}
	if v.Nodes[3].ID != "d" || strings.Join(v.Nodes[3].Parents, ",") != "b,c" || v.Nodes[0].Parents == nil {
		t.Fatalf("view: %+v", v)
	}
	// d started after both its parents finished.
	var b, c, d jobView
	getJSON(t, r, "/jobs/"+created.Nodes["b"], &b, bearer(tokenA)...)
	getJSON(t, r, "/jobs/"+created.Nodes["c"], &c, bearer(tokenA)...)
	getJSON(t, r, "/jobs/"+created.Nodes["d"], &d, bearer(tokenA)...)
	if d.StartedAt == nil || b.FinishedAt == nil || c.FinishedAt == nil || d.StartedAt.Before(*b.FinishedAt) || d.StartedAt.Before(*c.FinishedAt) {
		t.Fatalf("d started %v, b finished %v, c %v", d.StartedAt, b.FinishedAt, c.FinishedAt)
	}
	for _, path := range []string{"/workflows/" + created.WorkflowID, "/workflows/" + created.WorkflowID + "/events"} {
		resp, out := get(t, r.base+path, bearer(tokenB)...)
		if p := decodeProblem(t, resp, out); p.Status != 404 {
			t.Fatalf("another tenant's %s: %+v", path, p)
		}
	}
	resp, out = post(t, r, "/workflows/"+created.WorkflowID+"/cancel", "", bearer(tokenB)...)
	if p := decodeProblem(t, resp, out); p.Status != 404 {
		t.Fatalf("another tenant's cancel: %+v", p)
	}
	resp, out = post(t, r, "/workflows/"+created.WorkflowID+"/cancel", "", bearer(tokenA)...)
	if p := decodeProblem(t, resp, out); p.Status != 409 || p.Code != problem.CodeWorkflowEnded {
		t.Fatalf("cancel of a done workflow: %+v", p)
	}
	resp, out = get(t, r.base+"/workflows/"+created.WorkflowID+"/events", bearer(tokenA)...)
	if resp.StatusCode != 200 || strings.Count(out, "event: node") != 4 || !strings.Contains(out, "event: end\ndata: {\"status\":\"done\"}") {
		t.Fatalf("events: %d %s", resp.StatusCode, out)
	}
	resp, out = post(t, r, "/workflows", workflowBody(rebuildNode("a", "r-a")), bearer(tokenB)...)
	if p := decodeProblem(t, resp, out); p.Status != 403 || p.Field != "tenant_id" {
		t.Fatalf("another tenant's body: %+v", p)
	}
}

// Each refusal is 400 naming the node and its field (403 for a payload of another tenant than the
// token's); nothing is kept. A workflow of 1,000 nodes is larger than the default BODY_LIMIT.
func TestWorkflowValidationNamesNodeAndField(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, map[string]string{"API_TOKENS": twoTenants["API_TOKENS"], "BODY_LIMIT": "1048576"})
	big := make([]string, 1001)
	for i := range big {
		big[i] = rebuildNode(fmt.Sprintf("n%d", i), "r")
	}
	cases := []struct {
		name, body, field, node string
		status                  int
	}{
		{"cycle", workflowBody(rebuildNode("a", "r", "b"), rebuildNode("b", "r", "a")), "nodes[0].parents", `"a"`, 0},
		{"unknown parent", workflowBody(rebuildNode("a", "r"), rebuildNode("b", "r", "zz")), "nodes[1].parents", `"b"`, 0},
		{"duplicate id", workflowBody(rebuildNode("a", "r"), rebuildNode("a", "r")), "nodes[1].id", `"a"`, 0},
		{"unknown type", workflowBody(rebuildNode("a", "r"), `{"id":"b","type":"nope","payload":{},"parents":["a"]}`), "nodes[1].type", `"b"`, 0},
		{"invalid payload", workflowBody(rebuildNode("a", "r"), `{"id":"b","type":"rebuild-cache","payload":{"tenant_id":"t1","resource_id":"no spaces"}}`), "nodes[1].payload.resource_id", `"b"`, 0},
		{"payload of another tenant", workflowBody(`{"id":"a","type":"rebuild-cache","payload":{"tenant_id":"t2","resource_id":"r"}}`), "nodes[0].payload.tenant_id", `"a"`, 403},
		{"policy", workflowBody(rebuildNode("a", "r"), `{"id":"b","type":"rebuild-cache","payload":{"tenant_id":"t1","resource_id":"r"},"parents":["a"],"policy":"sometimes"}`), "nodes[1].policy", `"b"`, 0},
		{"too many", workflowBody(big...), "nodes", "", 0},
	}
	for _, tc := range cases {
		resp, out := post(t, r, "/workflows", tc.body, bearer(tokenA)...)
		p := decodeProblem(t, resp, out)
		if tc.status == 0 {
			tc.status = 400
		}
		if p.Status != tc.status || p.Field != tc.field || !strings.Contains(p.Detail, tc.node) {
			t.Errorf("%s: %+v", tc.name, p)
		}
	}
	if n := jobKeys(r); n != 0 {
		t.Fatalf("refused workflows left %d keys", n)
	}
}

// Without a worker the nodes wait: the roots queued, the others held; cancel ends every node
// cancelled and the workflow cancelled.
func TestWorkflowCancelEndpoint(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, twoTenants)
	resp, out := post(t, r, "/workflows", workflowBody(rebuildNode("a", "r-a"), rebuildNode("b", "r-b", "a"), rebuildNode("c", "r-c", "b")), bearer(tokenA)...)
	var created workflowCreated
	if err := json.Unmarshal([]byte(out), &created); err != nil || resp.StatusCode != 202 {
		t.Fatalf("create: %d %s", resp.StatusCode, out)
	}
	v := waitWorkflowView(t, r, created.WorkflowID, "running", bearer(tokenA)...)
	if v.Nodes[0].Status != "queued" || v.Nodes[1].Status != "held" || v.Nodes[2].Status != "held" {
		t.Fatalf("before the cancel: %+v", v)
	}
	resp, out = post(t, r, "/workflows/"+created.WorkflowID+"/cancel", "", bearer(tokenA)...)
	if err := json.Unmarshal([]byte(out), &v); err != nil || resp.StatusCode != 200 || v.Status != "cancelled" {
		t.Fatalf("cancel: %d %s", resp.StatusCode, out)
	}
	for _, n := range v.Nodes {
		if n.Status != "cancelled" {
			t.Fatalf("node after the cancel: %+v", n)
		}
	}
	// Its retry (the first answered 503 in a stall, and took) learns that it took.
	resp, out = post(t, r, "/workflows/"+created.WorkflowID+"/cancel", "", bearer(tokenA)...)
	if err := json.Unmarshal([]byte(out), &v); err != nil || resp.StatusCode != 200 || v.Status != "cancelled" {
		t.Fatalf("the cancel again: %d %s, want 200 cancelled", resp.StatusCode, out)
	}
	resp, _ = get(t, r.base+"/workflows/wf-nope", bearer(tokenA)...)
	if resp.StatusCode != 404 {
		t.Fatalf("a malformed id: %d", resp.StatusCode)
	}
}

// POST /batches: on_success and on_complete are enqueued once each when every job is done; the
// progress counts every job done.
func TestBatchEndpoints(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAll, twoTenants)
	job := func(res string) string {
		return fmt.Sprintf(`{"type":"rebuild-cache","payload":{"tenant_id":"t1","resource_id":%q}}`, res)
	}
	body := `{"tenant_id":"t1","jobs":[` + job("b1") + "," + job("b2") + "," + job("b3") + `],"on_success":` + job("ok") + `,"on_complete":` + job("all") + `}`
	resp, out := post(t, r, "/batches", body, bearer(tokenA)...)
	var created batchCreated
	if err := json.Unmarshal([]byte(out), &created); err != nil || resp.StatusCode != 202 || len(created.Jobs) != 3 || created.OnSuccess == "" {
		t.Fatalf("create: %d %s", resp.StatusCode, out)
	}
	var v batchView
	deadline := time.Now().Add(15 * time.Second)
	for {
		v = batchView{}
		getJSON(t, r, "/batches/"+created.BatchID, &v, bearer(tokenA)...)
		if v.Status == "done" || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if v.Status != "done" || v.Total != 3 || v.Done != 3 || v.Failed != 0 || v.Pending != 0 ||
		v.OnSuccess == nil || v.OnSuccess.Status != "done" || v.OnComplete.Status != "done" || v.OnComplete.JobID != created.OnComplete {
		t.Fatalf("batch: %+v %+v %+v", v, v.OnSuccess, v.OnComplete)
	}
	var cb jobView
	getJSON(t, r, "/jobs/"+created.OnSuccess, &cb, bearer(tokenA)...)
	if cb.Attempt != 1 || len(cb.Deliveries) != 1 {
		t.Fatalf("on_success ran %d times over %d deliveries", cb.Attempt, len(cb.Deliveries))
	}
	resp, _ = get(t, r.base+"/batches/"+created.BatchID, bearer(tokenB)...)
	if resp.StatusCode != 404 {
		t.Fatalf("another tenant's batch: %d", resp.StatusCode)
	}
	resp, out = post(t, r, "/batches", `{"tenant_id":"t1","jobs":[{"type":"rebuild-cache","payload":{"tenant_id":"t1"}}]}`, bearer(tokenA)...)
	if p := decodeProblem(t, resp, out); p.Status != 400 || p.Field != "jobs[0].payload.resource_id" {
		t.Fatalf("invalid job: %+v", p)
	}
}
