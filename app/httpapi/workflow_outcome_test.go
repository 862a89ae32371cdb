package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/app/problem"
)

// replyLost lets the next pipeline that confirms a workflow (the one that indexes it) run on
// Redis, then loses its reply, as a connection cut after the write would.
type replyLost struct{ armed atomic.Bool }

var errReplyLost = errors.New("read tcp: i/o timeout")

func (h *replyLost) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *replyLost) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *replyLost) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if !h.confirmsWorkflow(cmds) || !h.armed.CompareAndSwap(true, false) {
			return err
		}
		for _, c := range cmds {
			c.SetErr(errReplyLost)
		}
		return errReplyLost
	}
}

func (h *replyLost) confirmsWorkflow(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if args := c.Args(); len(args) > 1 && c.Name() == "zadd" && strings.HasSuffix(fmt.Sprint(args[1]), "{workflows}") {
			return true
		}
	}
	return false
}

// A workflow or a batch whose confirmation landed but whose reply was lost is answered 503
// outcome_unknown, and a retry with the same Idempotency-Key gets the one created (replayed), not
// a second one: its answer was stored in the confirmation's round trip. Before, the 503 released
// the key, and the retry created the workflow again.
func TestWorkflowOutcomeUnknownRetryGetsTheSameWorkflow(t *testing.T) {
	t.Parallel()
	lost := &replyLost{}
	r := startAppWith(t, RoleAll, twoTenants, func(a Process) { a.Redis().AddHook(lost) })
	job := func(res string) string {
		return fmt.Sprintf(`{"type":"rebuild-cache","payload":{"tenant_id":"t1","resource_id":%q}}`, res)
	}
	for _, c := range []struct{ path, body, idField string }{
		{"/workflows", workflowBody(rebuildNode("a", "lost-a"), rebuildNode("b", "lost-b", "a")), "workflow_id"},
		{"/batches", `{"tenant_id":"t1","jobs":[` + job("lost-1") + "," + job("lost-2") + `]}`, "batch_id"},
	} {
		h := append(bearer(tokenA), "Idempotency-Key", `"lost-`+c.path[1:]+`"`)
		lost.armed.Store(true)
		resp, out := post(t, r, c.path, c.body, h...)
		if p := decodeProblem(t, resp, out); p.Status != 503 || p.Code != problem.CodeOutcomeUnknown {
			t.Fatalf("%s with its confirmation's reply lost: %+v", c.path, p)
		}
		if lost.armed.Load() {
			t.Fatalf("%s: no confirmation went through the hook", c.path)
		}
		resp, out = post(t, r, c.path, c.body, h...)
		var created map[string]any
		if err := json.Unmarshal([]byte(out), &created); err != nil || resp.StatusCode != 202 {
			t.Fatalf("%s retried: %d %s", c.path, resp.StatusCode, out)
		}
		if resp.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("%s retried with the same key created another: %s", c.path, out)
		}
		id, _ := created[c.idField].(string)
		var v workflowView
		if code := getJSON(t, r, c.path+"/"+id, &v, bearer(tokenA)...); code != 200 {
			t.Fatalf("%s %s answered by the replay: %d", c.path, id, code)
		}
		if c.path == "/workflows" {
			waitWorkflowView(t, r, id, "done", bearer(tokenA)...)
		}
	}
}
