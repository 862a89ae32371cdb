package httpapi

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"
)

// nodeEvents are a workflow stream's node events, decoded, and whether it ended with `end`.
func nodeEvents(t *testing.T, events []sse) (nodes []map[string]string, ids []int, end string) {
	t.Helper()
	for _, e := range events {
		switch e.Event {
		case "node":
			var d map[string]string
			if err := json.Unmarshal([]byte(e.Data), &d); err != nil {
				t.Fatalf("node event %+v: %v", e, err)
			}
			id, err := strconv.Atoi(e.ID)
			if err != nil {
				t.Fatalf("node event without a numeric id: %+v", e)
			}
			nodes, ids = append(nodes, d), append(ids, id)
		case "end":
			end = e.Data
		}
	}
	return nodes, ids, end
}

// The ends of a workflow's nodes are numbered 1, 2, ... in the order they were told, and each
// node's end event carries its number as id: Last-Event-ID n resumes with the ends after n only.
func TestWorkflowEventsResumeAfterLastEventID(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAll, twoTenants)
	body := workflowBody(rebuildNode("a", "re-a"), rebuildNode("b", "re-b", "a"), rebuildNode("c", "re-c", "a"), rebuildNode("d", "re-d", "b", "c"))
	resp, out := post(t, r, "/workflows", body, bearer(tokenA)...)
	var created workflowCreated
	if err := json.Unmarshal([]byte(out), &created); err != nil || resp.StatusCode != 202 {
		t.Fatalf("create: %d %s", resp.StatusCode, out)
	}
	waitWorkflowView(t, r, created.WorkflowID, "done", bearer(tokenA)...)
	path := "/workflows/" + created.WorkflowID + "/events"
	all, ids, end := nodeEvents(t, collect(t, readEvents(openEvents(t, context.Background(), r, path, bearer(tokenA)...)), 10*time.Second))
	if len(all) != 4 || end != `{"status":"done"}` {
		t.Fatalf("fresh stream: %v %v %s", all, ids, end)
	}
	for i, n := range all {
		if ids[i] != i+1 || n["status"] != "done" || n["job_id"] != created.Nodes[n["id"]] {
			t.Fatalf("fresh stream's event %d: id %d %v", i, ids[i], n)
		}
	}
	if all[0]["id"] != "a" || all[3]["id"] != "d" {
		t.Fatalf("ends out of order: %v", all)
	}
	rest, restIDs, end := nodeEvents(t, collect(t, readEvents(openEvents(t, context.Background(), r, path,
		append(bearer(tokenA), "Last-Event-ID", "2")...)), 10*time.Second))
	if len(rest) != 2 || restIDs[0] != 3 || restIDs[1] != 4 || rest[0]["id"] != all[2]["id"] || rest[1]["id"] != "d" || end != `{"status":"done"}` {
		t.Fatalf("resumed after 2: %v %v %s", rest, restIDs, end)
	}
	rest, _, end = nodeEvents(t, collect(t, readEvents(openEvents(t, context.Background(), r, path,
		append(bearer(tokenA), "Last-Event-ID", "4")...)), 10*time.Second))
	if len(rest) != 0 || end != `{"status":"done"}` {
		t.Fatalf("resumed after the last end: %v %s", rest, end)
	}
	resp, out = get(t, r.base+path, append(bearer(tokenA), "Last-Event-ID", "x")...)
	if p := decodeProblem(t, resp, out); p.Status != 400 || p.Field != "Last-Event-ID" {
		t.Fatalf("bad Last-Event-ID: %+v", p)
	}
}

// A running workflow's stream sends every node's live status with id 0 (no end yet); a stream
// resumed with Last-Event-ID 0 does not send them again (the nodes are as created), and gets each
// end once, numbered, when the workflow is cancelled.
func TestWorkflowEventsResumeLive(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, twoTenants) // no worker: the root stays queued, the others held
	body := workflowBody(rebuildNode("a", "rl-a"), rebuildNode("b", "rl-b", "a"), rebuildNode("c", "rl-c", "a"), rebuildNode("d", "rl-d", "b", "c"))
	resp, out := post(t, r, "/workflows", body, bearer(tokenA)...)
	var created workflowCreated
	if err := json.Unmarshal([]byte(out), &created); err != nil || resp.StatusCode != 202 {
		t.Fatalf("create: %d %s", resp.StatusCode, out)
	}
	path := "/workflows/" + created.WorkflowID + "/events"
	ctx, cancel := context.WithCancel(context.Background())
	ch := readEvents(openEvents(t, ctx, r, path, bearer(tokenA)...))
	var first []sse
	for len(first) < 4 {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("the stream closed after %+v", first)
			}
			first = append(first, e)
		case <-time.After(10 * time.Second):
			t.Fatalf("four node events did not come; so far %+v", first)
		}
	}
	cancel()
	live, ids, _ := nodeEvents(t, first)
	want := map[string]string{"a": "queued", "b": "held", "c": "held", "d": "held"}
	for i, n := range live {
		if ids[i] != 0 || want[n["id"]] != n["status"] {
			t.Fatalf("live event %d: id %d %v", i, ids[i], n)
		}
	}

	resumed := readEvents(openEvents(t, context.Background(), r, path, append(bearer(tokenA), "Last-Event-ID", "0")...))
	resp, out = post(t, r, "/workflows/"+created.WorkflowID+"/cancel", "", bearer(tokenA)...)
	if resp.StatusCode != 200 {
		t.Fatalf("cancel: %d %s", resp.StatusCode, out)
	}
	ends, endIDs, end := nodeEvents(t, collect(t, resumed, 10*time.Second))
	if len(ends) != 4 || end != `{"status":"cancelled"}` {
		t.Fatalf("resumed stream: %v %v %s", ends, endIDs, end)
	}
	seen := map[string]bool{}
	for i, n := range ends {
		if endIDs[i] != i+1 || n["status"] != "cancelled" || seen[n["id"]] {
			t.Fatalf("resumed event %d: id %d %v (all %v)", i, endIDs[i], n, ends)
		}
		seen[n["id"]] = true
	}
}
