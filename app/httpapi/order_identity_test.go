package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/locking"
)

// An order is (tenant, order id): the same order id with another sku (or quantity) is a 409 that
// names order_id, and only the first is reserved; the same body again is the same order.
func TestConflictingOrderIs409(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAll, nil)
	first := `{"tenant_id":"t1","order_id":"o1","sku":"s1","quantity":2}`
	resp, body := post(t, r, "/jobs/reserve-stock", first)
	var a jobAnswer
	_ = json.Unmarshal([]byte(body), &a)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatal(resp.StatusCode, body)
	}
	for _, other := range []string{
		`{"tenant_id":"t1","order_id":"o1","sku":"s2","quantity":2}`,
		`{"tenant_id":"t1","order_id":"o1","sku":"s1","quantity":3}`,
	} {
		resp, body := post(t, r, "/jobs/reserve-stock", other)
		p := decodeProblem(t, resp, body)
		if p.Status != http.StatusConflict || p.Code != problem.CodeOrderConflict || p.Field != "order_id" {
			t.Fatalf("%s: %+v", other, p)
		}
	}
	// The same body at once: the same job (until_done dedup), or, if it already ran, a job that
	// finds the order applied.
	resp, body = post(t, r, "/jobs/reserve-stock", first)
	var dup jobAnswer
	_ = json.Unmarshal([]byte(body), &dup)
	if resp.StatusCode >= 300 {
		t.Fatalf("the same order at once: %d %s", resp.StatusCode, body)
	}
	if v := waitJob(t, r, dup.JobID, "done"); dup.JobID != a.JobID && v.Result != "already_applied" {
		t.Fatalf("the same order at once applied again: %+v", v)
	}
	waitJob(t, r, a.JobID, "done")
	// The same body again: the same order, reserved once (the job is done, so a new job finds it applied).
	resp, body = post(t, r, "/jobs/reserve-stock", first)
	var again jobAnswer
	_ = json.Unmarshal([]byte(body), &again)
	if resp.StatusCode >= 300 {
		t.Fatalf("the same order again: %d %s", resp.StatusCode, body)
	}
	if v := waitJob(t, r, again.JobID, "done"); again.JobID != a.JobID && v.Result != "already_applied" {
		t.Fatalf("the same order again applied: %+v", v)
	}
	// Another tenant's o1 is another order.
	if resp, body := post(t, r, "/jobs/reserve-stock", `{"tenant_id":"t2","order_id":"o1","sku":"s2","quantity":1}`); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("another tenant's o1: %d %s", resp.StatusCode, body)
	}
	type stock struct {
		Reserved      int64 `json:"reserved"`
		OrdersApplied int64 `json:"orders_applied"`
	}
	var s1, s2 stock
	getJSON(t, r, "/stock/t1/s1", &s1)
	getJSON(t, r, "/stock/t1/s2", &s2)
	if s1.Reserved != 2 || s1.OrdersApplied != 1 || s2.Reserved != 0 || s2.OrdersApplied != 0 {
		t.Fatalf("stock s1 %+v, s2 %+v: want o1 reserved once, on s1", s1, s2)
	}
}

// A request whose enqueue kept nothing (here: a duplicate of a job whose enqueue never got
// confirmed, answered 503) releases the order claim it created, so the order is free again.
func TestOrderClaimReleasedWhenNothingWasKept(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, nil)
	locks := locking.New(r.Redis(), locking.WithPrefix("jobguard"))
	tag := engine.ResourceTag("t1:s1")
	dead := engine.NewJobID("t1:s1", time.Now())
	for _, name := range []string{"dedup:order:t1:o9", "dedup-pending:order:t1:o9"} {
		r.Redis().Set(context.Background(), locks.Key(tag, name), dead, time.Minute)
	}
	resp, body := post(t, r, "/jobs/reserve-stock", `{"tenant_id":"t1","order_id":"o9","sku":"s1","quantity":1}`)
	if p := decodeProblem(t, resp, body); p.Status != http.StatusServiceUnavailable || p.Code != problem.CodeDedupPending {
		t.Fatalf("duplicate of an unconfirmed job: %+v", p)
	}
	if n := r.Redis().Exists(context.Background(), "jobguard:{order:t1:o9}").Val(); n != 0 {
		t.Fatal("the order claim outlived a 503 that kept nothing")
	}
	if resp, body := post(t, r, "/jobs/reserve-stock", `{"tenant_id":"t1","order_id":"o9","sku":"s2","quantity":1}`); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("the order, free again, with another sku: %d %s", resp.StatusCode, body)
	}
}

// A workflow's or a batch's node claims its order as the single route does: other content under
// an order id already submitted, or twice in one workflow, is a 409 naming the node's order_id,
// and nothing of the request is created (such a node was created, and its job ended done as
// already applied, its quantity dropped). The same content goes on. The orders a refused request
// claimed before its conflict stay bound to its content (another request with that content may
// rely on them); an invalid workflow claims none.
func TestWorkflowAndBatchNodesClaimTheirOrder(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, nil)
	order := func(id string, qty int) string {
		return `{"tenant_id":"t1","order_id":"` + id + `","sku":"s1","quantity":` + strconv.Itoa(qty) + `}`
	}
	if resp, body := post(t, r, "/jobs/reserve-stock", order("w1", 1)); resp.StatusCode != http.StatusAccepted {
		t.Fatal(resp.StatusCode, body)
	}
	node := func(id, payload string) string {
		return `{"id":"` + id + `","type":"reserve-stock","payload":` + payload + `}`
	}
	for _, c := range []struct{ path, body, field string }{
		{"/workflows", `{"tenant_id":"t1","nodes":[` + node("a", order("w1", 5)) + `]}`, "nodes[0].payload.order_id"},
		{"/workflows", `{"tenant_id":"t1","nodes":[` + node("a", order("w2", 1)) + `,` + node("b", order("w2", 2)) + `]}`, "nodes[1].payload.order_id"},
		{"/batches", `{"tenant_id":"t1","jobs":[{"type":"reserve-stock","payload":` + order("w3", 1) + `},{"type":"reserve-stock","payload":` + order("w1", 7) + `}]}`, "jobs[1].payload.order_id"},
		{"/batches", `{"tenant_id":"t1","jobs":[{"type":"reserve-stock","payload":` + order("w4", 1) + `}],"on_success":{"type":"reserve-stock","payload":` + order("w1", 9) + `}}`, "on_success.payload.order_id"},
	} {
		before := jobKeys(r) - orderClaims(t, r)
		resp, body := post(t, r, c.path, c.body)
		if p := decodeProblem(t, resp, body); p.Status != http.StatusConflict || p.Code != problem.CodeOrderConflict || p.Field != c.field {
			t.Fatalf("%s %s: %+v, want 409 %s naming %s", c.path, c.body, p, problem.CodeOrderConflict, c.field)
		}
		if n := jobKeys(r) - orderClaims(t, r); n != before {
			t.Fatalf("%s refused: %d keys kept besides order claims", c.path, n-before)
		}
	}
	// The orders the refused requests claimed first (w2, w3, w4) keep their content: the same
	// content is the same order, other content a conflict.
	for _, id := range []string{"w2", "w3", "w4"} {
		if resp, body := post(t, r, "/jobs/reserve-stock", order(id, 1)); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("order %s with the refused request's content: %d %s", id, resp.StatusCode, body)
		}
		resp, body := post(t, r, "/jobs/reserve-stock", order(id, 3))
		if p := decodeProblem(t, resp, body); p.Status != http.StatusConflict {
			t.Fatalf("order %s with other content after the refused request: %+v", id, p)
		}
	}
	// A workflow the engine refuses (a cycle) is a 400 and claims nothing.
	cycle := `{"tenant_id":"t1","nodes":[{"id":"a","type":"reserve-stock","parents":["b"],"payload":` + order("w6", 1) +
		`},{"id":"b","type":"reserve-stock","parents":["a"],"payload":` + order("w7", 1) + `}]}`
	resp, body := post(t, r, "/workflows", cycle)
	if p := decodeProblem(t, resp, body); p.Status != http.StatusBadRequest {
		t.Fatalf("a cyclic workflow: %+v", p)
	}
	if resp, body := post(t, r, "/jobs/reserve-stock", order("w6", 4)); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("an order of the refused cyclic workflow, other content: %d %s", resp.StatusCode, body)
	}
	resp, body = post(t, r, "/workflows", `{"tenant_id":"t1","nodes":[`+node("a", order("w1", 1))+`,`+node("b", order("w5", 1))+`]}`)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("a workflow of the same content: %d %s", resp.StatusCode, body)
	}
}

// orderClaims counts the orders' claims (live data: they never expire).
func orderClaims(t *testing.T, r *running) int {
	t.Helper()
	keys, err := r.Redis().Keys(context.Background(), "*{order:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return len(keys)
}

// A bulk's or a workflow's orders are claimed in one round trip, whatever their number (they
// were one each: 1,000 orders, 1,000 round trips before the enqueue); each still gets its own
// answer: a conflict among many is its item's 409, the others are created.
func TestManyOrdersAreClaimedInOneRoundTrip(t *testing.T) {
	t.Parallel()
	claims := &claimTrips{}
	r := startAppWith(t, RoleAPI, nil, func(a Process) { a.Redis().AddHook(claims) })
	order := func(id string, qty int) string {
		return `{"tenant_id":"t1","order_id":"` + id + `","sku":"s1","quantity":` + strconv.Itoa(qty) + `}`
	}
	bulk := func(prefix string, n int) string {
		items := make([]string, n)
		for i := range items {
			items[i] = order(prefix+strconv.Itoa(i), 1)
		}
		return `{"items":[` + strings.Join(items, ",") + `]}`
	}
	trips := func(path, body string) (int64, string) {
		before := claims.n.Load()
		resp, out := post(t, r, path, body)
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, out)
		}
		return claims.n.Load() - before, out
	}
	// At most 2: the first claims of a process may meet a server without the script (NOSCRIPT),
	// loaded and sent again.
	if n, _ := trips("/jobs/reserve-stock/bulk", bulk("many-", 60)); n > 2 {
		t.Fatalf("a bulk of 60 orders claimed them in %d round trips", n)
	}
	// The third item reuses many-5 with another quantity: its own 409, the rest created.
	mixed := `{"items":[` + order("mixed-0", 1) + "," + order("mixed-1", 1) + "," + order("many-5", 7) + "," + order("mixed-3", 1) + `]}`
	_, out := trips("/jobs/reserve-stock/bulk", mixed)
	var ans bulkAnswer
	if err := json.Unmarshal([]byte(out), &ans); err != nil {
		t.Fatal(err)
	}
	if ans.Created != 3 || ans.Refused != 1 || ans.Items[2].Problem == nil || ans.Items[2].Problem.Code != problem.CodeOrderConflict {
		t.Fatalf("a bulk with one conflicting order: %s", out)
	}
	nodes := make([]string, 60)
	for i := range nodes {
		nodes[i] = `{"id":"n` + strconv.Itoa(i) + `","type":"reserve-stock","payload":` + order("wf-"+strconv.Itoa(i), 1) + `}`
	}
	if n, _ := trips("/workflows", `{"tenant_id":"t1","nodes":[`+strings.Join(nodes, ",")+`]}`); n != 1 {
		t.Fatalf("a workflow of 60 orders claimed them in %d round trips", n)
	}
}

// claimTrips counts the round trips (a command alone, or a pipeline) that claim an order: a
// command on an order's key ("{order:...}").
type claimTrips struct{ n atomic.Int64 }

func (h *claimTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *claimTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if claimsAnOrder(cmd) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *claimTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, claimsAnOrder) {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

func claimsAnOrder(cmd redis.Cmder) bool {
	return slices.ContainsFunc(cmd.Args(), func(a any) bool {
		s, ok := a.(string)
		return ok && strings.Contains(s, "{order:")
	})
}
