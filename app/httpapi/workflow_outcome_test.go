package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// replyLost lets the next pipeline that confirms a workflow run on
// Redis, then loses its reply, as a connection cut after the write would.
type replyLost struct {
	testsupport.PipelinesOnly
	armed atomic.Bool
}

var errReplyLost = errors.New("read tcp: i/o timeout")

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

// confirmsWorkflow tells the pipeline of a workflow's confirmation (wf_confirm: EVAL script 1
// <the workflow's hash>).
func (h *replyLost) confirmsWorkflow(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if args := c.Args(); len(args) > 3 && c.Name() == "eval" && fmt.Sprint(args[2]) == "1" && strings.HasSuffix(fmt.Sprint(args[3]), "}:wf") {
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

// lateAnswer lets the next pipeline that confirms a workflow run on Redis as if the request's
// deadline passed between the confirmation and the answer stored after it (a deadline the answer
// checks is moved to the past), then loses its reply.
type lateAnswer struct{ replyLost }

func (h *lateAnswer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	lose := h.replyLost.ProcessPipelineHook(next)
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.confirmsWorkflow(cmds) && h.armed.Load() {
			for _, c := range cmds {
				args := c.Args()
				// idem_complete: EVAL script 1 key token status body location retention deadline
				if len(args) == 10 && c.Name() == "eval" && fmt.Sprint(args[2]) == "1" && strings.Contains(fmt.Sprint(args[3]), "{idem:") {
					args[9] = int64(1) // long past
				}
			}
		}
		return lose(ctx, cmds)
	}
}

// An answer stored with a workflow's confirmation is conditional on that confirmation, not on the
// clock: when the request's deadline passed between the two adjacent commands (and the reply was
// lost), the workflow stood without its answer, the key was released, and a retry with it created
// the workflow a second time.
func TestWorkflowAnswerFollowsItsConfirmationNotTheClock(t *testing.T) {
	t.Parallel()
	late := &lateAnswer{}
	r := startAppWith(t, RoleAll, twoTenants, func(a Process) { a.Redis().AddHook(late) })
	h := append(bearer(tokenA), "Idempotency-Key", `"late-answer"`)
	body := workflowBody(rebuildNode("a", "late-a"))
	late.armed.Store(true)
	resp, out := post(t, r, "/workflows", body, h...)
	if p := decodeProblem(t, resp, out); p.Status != 503 || p.Code != problem.CodeOutcomeUnknown {
		t.Fatalf("a workflow with its confirmation's reply lost: %+v", p)
	}
	resp, out = post(t, r, "/workflows", body, h...)
	if resp.StatusCode != 202 || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retried with the same key: %d %s (replayed %q), want the first workflow replayed", resp.StatusCode, out,
			resp.Header.Get("Idempotent-Replayed"))
	}
}

// jobAnswerLost loses the reply of the next pipeline that stores an Idempotency-Key's answer with
// a job's confirmation, having sent what send picks of its commands (answer: the answer's index).
type jobAnswerLost struct {
	testsupport.PipelinesOnly
	armed atomic.Bool
	send  func(cmds []redis.Cmder, answer int) []redis.Cmder
}

func (h *jobAnswerLost) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		answer := slices.IndexFunc(cmds, storesAnAnswer)
		if answer < 0 || !h.armed.CompareAndSwap(true, false) {
			return next(ctx, cmds)
		}
		if sent := h.send(cmds, answer); len(sent) > 0 {
			_ = next(ctx, sent)
		}
		for _, c := range cmds {
			c.SetErr(errReplyLost)
		}
		return errReplyLost
	}
}

// stalledBeforeTheAnswer sends the whole pipeline as a Redis stalled between the confirmation and
// the answer would run it: the answer once the request's deadline has passed (an answer that
// checks that deadline is given one long past).
func stalledBeforeTheAnswer(cmds []redis.Cmder, answer int) []redis.Cmder {
	if args := cmds[answer].Args(); fmt.Sprint(args[2]) == "1" && len(args) == 10 {
		args[9] = int64(1) // idem_complete: EVAL script 1 key token status body location retention deadline
	}
	return cmds
}

// cutBeforeTheAnswer sends the commands before the answer: the connection is cut inside the pipeline.
func cutBeforeTheAnswer(cmds []redis.Cmder, answer int) []redis.Cmder { return cmds[:answer] }

// cutAtOnce sends nothing: the connection is cut before the pipeline reached Redis.
func cutAtOnce([]redis.Cmder, int) []redis.Cmder { return nil }

// storesAnAnswer tells the command that stores an Idempotency-Key's answer (EVAL with its record
// first among the keys).
func storesAnAnswer(c redis.Cmder) bool {
	args := c.Args()
	return c.Name() == "eval" && len(args) > 3 && strings.Contains(fmt.Sprint(args[3]), "{idem:")
}

// A job whose confirmation took while the answer stored after it missed the request's deadline (a
// Redis stalled between the two commands), the reply lost, is answered 503 outcome_unknown; a retry
// with the key, once the claim has run out, gets that job replayed. Before, the answer was refused
// by its own deadline check, and the retry created and ran a second job (a stall probe: 4 in 4).
func TestAJobsAnswerFollowsItsConfirmationNotTheClock(t *testing.T) {
	t.Parallel()
	split := &jobAnswerLost{send: stalledBeforeTheAnswer}
	r := startAppWith(t, RoleAPI, map[string]string{"API_TOKENS": twoTenants["API_TOKENS"], "REQUEST_TIMEOUT": "1s"}, func(a Process) { a.Redis().AddHook(split) })
	h := append(bearer(tokenA), "Idempotency-Key", `"split-job-answer"`)
	body := `{"tenant_id":"t1","resource_id":"split"}`
	split.armed.Store(true)
	resp, out := post(t, r, "/jobs/rebuild-cache", body, h...)
	if p := decodeProblem(t, resp, out); p.Status != 503 || p.Code != problem.CodeOutcomeUnknown || split.armed.Load() {
		t.Fatalf("a job with its confirmation's reply lost: %+v (hook armed still: %v)", p, split.armed.Load())
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, out = post(t, r, "/jobs/rebuild-cache", body, h...)
		if resp.StatusCode != 409 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if resp.StatusCode != 202 || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retried with the same key: %d %s (replayed %q), want the first job replayed", resp.StatusCode, out,
			resp.Header.Get("Idempotent-Replayed"))
	}
}

// A job's outcome_unknown is settled once its request's deadline has passed: a job whose
// confirmation took without its answer (the connection cut inside the pipeline) gets its answer
// stored, and a retry with the key replays it; one whose confirmation never ran has its key
// released, and a retry creates the job. Before, the key ran out unanswered, and a retry created
// a second job (here the resource's dedup caught it: answered as a duplicate, not replayed).
func TestAJobsUnknownOutcomeIsSettledAfterItsDeadline(t *testing.T) {
	t.Parallel()
	// A deadline of 3 s, not 1: on a machine busy compiling (make test from an empty cache) the
	// first request once took 818 ms and reached Redis past its write deadline (1 s less 250 ms),
	// before the hook could lose anything.
	cut := &jobAnswerLost{}
	r := startAppWith(t, RoleAPI, map[string]string{"API_TOKENS": twoTenants["API_TOKENS"], "REQUEST_TIMEOUT": "3s"},
		func(a Process) { a.Redis().AddHook(cut) })
	for _, c := range []struct {
		before   bool
		replayed string
	}{{false, "true"}, {true, ""}} {
		h := append(bearer(tokenA), "Idempotency-Key", fmt.Sprintf(`"cut-%v"`, c.before))
		body := fmt.Sprintf(`{"tenant_id":"t1","resource_id":"cut-%v"}`, c.before)
		cut.send = cutBeforeTheAnswer
		if c.before {
			cut.send = cutAtOnce
		}
		cut.armed.Store(true)
		resp, out := unknownThenSettled(t, r, body, h, &cut.armed, fmt.Sprintf("cut before the confirmation %v", c.before))
		if resp.StatusCode != 202 || resp.Header.Get("Idempotent-Replayed") != c.replayed {
			t.Fatalf("cut before the confirmation %v, retried with the key: %d %s (replayed %q), want 202 replayed %q",
				c.before, resp.StatusCode, out, resp.Header.Get("Idempotent-Replayed"), c.replayed)
		}
	}
}

// unknownThenSettled posts job body with headers h while a hook armed by armed loses its answer:
// the request must be answered 503 outcome_unknown, with the hook spent. It then retries the
// request (the same Idempotency-Key) while the key is held (409), for up to 10 s, and returns the
// first other answer.
func unknownThenSettled(t *testing.T, r *running, body string, h []string, armed *atomic.Bool, what string) (*http.Response, string) {
	t.Helper()
	resp, out := post(t, r, "/jobs/rebuild-cache", body, h...)
	if p := decodeProblem(t, resp, out); p.Status != 503 || p.Code != problem.CodeOutcomeUnknown || armed.Load() {
		t.Fatalf("%s: %+v (hook armed still: %v)", what, p, armed.Load())
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, out = post(t, r, "/jobs/rebuild-cache", body, h...)
		if resp.StatusCode != 409 || time.Now().After(deadline) {
			return resp, out
		}
		time.Sleep(50 * time.Millisecond)
	}
}
