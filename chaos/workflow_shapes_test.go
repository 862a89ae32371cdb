package chaos

import (
	"encoding/json"
	"fmt"
	"strings"
)

// The workflows and batches TestChaosWorkflows creates. Every node is a reserve-stock order of its
// own (order id "<label>-<node>", sku "<label>"): its effect, a fenced Apply under the order's
// operation key, appends one entry to the sku's ledger, so the ledger counts how many times each
// node's effect landed.

// wfShape is one kind of workflow: its name and its nodes.
type wfShape struct {
	name  string
	nodes func() []wfNode
}

// wfNode is a node of a workflow body.
type wfNode struct {
	id      string
	parents []string
	policy  string // "" (all_done) or all_ended
}

// wfShapes are the shapes, created in turn.
var wfShapes = []wfShape{
	{"diamond", diamondShape},
	{"fan-out 20, fan-in", fanShape},
	{"chain of 10", chainShape},
	{"diamond, chain, all_ended clean-up", cleanupShape},
}

func diamondShape() []wfNode {
	return []wfNode{{id: "a"}, {id: "b", parents: []string{"a"}}, {id: "c", parents: []string{"a"}}, {id: "d", parents: []string{"b", "c"}}}
}

func fanShape() []wfNode {
	nodes := []wfNode{{id: "root"}}
	var leaves []string
	for i := range 20 {
		leaves = append(leaves, fmt.Sprint("f", i))
		nodes = append(nodes, wfNode{id: leaves[i], parents: []string{"root"}})
	}
	return append(nodes, wfNode{id: "join", parents: leaves})
}

func chainShape() []wfNode {
	nodes := []wfNode{{id: "n0"}}
	for i := 1; i < 10; i++ {
		nodes = append(nodes, wfNode{id: fmt.Sprint("n", i), parents: []string{fmt.Sprint("n", i-1)}})
	}
	return nodes
}

// cleanupShape is the suite's first shape: a diamond, a chain behind it, a clean-up that runs
// however they end.
func cleanupShape() []wfNode {
	return append(diamondShape(), wfNode{id: "e", parents: []string{"d"}},
		wfNode{id: "cleanup", parents: []string{"d", "e"}, policy: "all_ended"})
}

// orderPayload is the reserve-stock payload of node id of the workflow or batch label.
func orderPayload(label, id string) string {
	return fmt.Sprintf(`{"tenant_id":"t1","order_id":"%s-%s","sku":%q,"quantity":1}`, label, id, label)
}

// workflowBody is the POST /workflows body of shape s, labelled label.
func workflowBody(label string, nodes []wfNode) string {
	parts := make([]string, len(nodes))
	for i, n := range nodes {
		ps, _ := json.Marshal(n.parents)
		if n.parents == nil {
			ps = []byte("[]")
		}
		policy := ""
		if n.policy != "" {
			policy = fmt.Sprintf(`,"policy":%q`, n.policy)
		}
		parts[i] = fmt.Sprintf(`{"id":%q,"type":"reserve-stock","payload":%s,"parents":%s%s}`, n.id, orderPayload(label, n.id), ps, policy)
	}
	return `{"tenant_id":"t1","nodes":[` + strings.Join(parts, ",") + `]}`
}

// batchJobs is how many jobs a batch has, callbacks apart.
const batchJobs = 6

// failingResource names the rebuild-cache resource the test's source answers 404 for: a job
// of it fails at once (a permanent error), so its batch's on_success is skipped.
func failingResource(label string) string { return "fail-" + label }

// batchBody is the POST /batches body of batch label: batchJobs orders (the last replaced by a
// rebuild-cache job that fails when failing), on_success and on_complete, each an order of its
// own sku (label-ons, label-onc) so that the jobs of each callback can be counted by resource.
func batchBody(label string, failing bool) string {
	jobs := make([]string, batchJobs)
	for i := range jobs {
		jobs[i] = fmt.Sprintf(`{"type":"reserve-stock","payload":%s}`, orderPayload(label, fmt.Sprint("j", i)))
	}
	if failing {
		jobs[batchJobs-1] = fmt.Sprintf(`{"type":"rebuild-cache","payload":{"tenant_id":"t1","resource_id":%q}}`, failingResource(label))
	}
	callback := func(kind string) string {
		return fmt.Sprintf(`{"type":"reserve-stock","payload":%s}`, orderPayload(label+"-"+kind, kind))
	}
	return fmt.Sprintf(`{"tenant_id":"t1","jobs":[%s],"on_success":%s,"on_complete":%s}`,
		strings.Join(jobs, ","), callback("ons"), callback("onc"))
}
