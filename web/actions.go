package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/hibiken/asynq"
)

// The UI's task actions on a jobguard delivery act on its job, so that asynq's state follows the
// job record instead of drifting from it. Wrapped (everything else reaches asynqmon unchanged):
//
//	DELETE {state}_tasks/{id}, POST {state}_tasks:batch_delete, DELETE {state}_tasks:delete_all
//	POST {state}_tasks/{id}:archive, POST {state}_tasks:batch_archive, POST {state}_tasks:archive_all
//	    for state pending, scheduled and retry: the job is cancelled, its delivery removed;
//	POST archived_tasks/{id}:run, POST archived_tasks:batch_run, POST archived_tasks:run_all
//	    the job is replayed (the rules of POST /jobs/{id}/retry), its dead letter removed;
//	POST active_tasks/{id}:cancel, POST active_tasks:batch_cancel, POST active_tasks:cancel_all
//	    the running job is cancelled (asynq's own cancel would only interrupt the run, which the
//	    engine then retries): its fence is raised and its handler's context ends with
//	    engine.ErrCancelled at the keeper's next renewal.
//
// all under {root}/api/queues/{qname}/. A task that is not a jobguard delivery, or a delivery that
// is not its job's current one (a leftover the engine refuses at its start anyway), gets asynq's
// own action, as asynqmon would have done. In read-only mode nothing is wrapped: asynqmon refuses
// every change itself.

// taskAction is one wrapped call, parsed from its method and path.
type taskAction struct {
	queue, state string
	verb         string // delete, archive or run
	scope        string // one, batch or all
	taskID       string // scope one only
}

// cancelStates are the states whose delete and archive cancel the job.
var cancelStates = map[string]bool{"pending": true, "scheduled": true, "retry": true}

// parseAction reads a wrapped call from rest, the path after {root}/api/queues/; ok is false for
// every other call.
func parseAction(method, rest string) (taskAction, bool) {
	qname, tail, found := strings.Cut(rest, "/")
	if !found || qname == "" {
		return taskAction{}, false
	}
	q, err := url.PathUnescape(qname)
	if err != nil {
		return taskAction{}, false
	}
	a := taskAction{queue: q}
	if coll, seg, one := strings.Cut(tail, "/"); one {
		// {state}_tasks/{id} (DELETE) and {state}_tasks/{id}:{verb} (POST), as asynqmon's router
		// reads them: the id is the segment, up to the verb.
		state, isTasks := strings.CutSuffix(coll, "_tasks")
		if !isTasks || seg == "" || strings.Contains(seg, "/") {
			return taskAction{}, false
		}
		a.scope, a.state = "one", state
		switch {
		case method == fiber.MethodDelete:
			a.verb = "delete"
		case method == fiber.MethodPost && strings.HasSuffix(seg, ":archive"):
			a.verb, seg = "archive", strings.TrimSuffix(seg, ":archive")
		case method == fiber.MethodPost && strings.HasSuffix(seg, ":run"):
			a.verb, seg = "run", strings.TrimSuffix(seg, ":run")
		case method == fiber.MethodPost && strings.HasSuffix(seg, ":cancel"):
			a.verb, seg = "cancel", strings.TrimSuffix(seg, ":cancel")
		default:
			return taskAction{}, false
		}
		if a.taskID, err = url.PathUnescape(seg); err != nil || a.taskID == "" {
			return taskAction{}, false
		}
	} else {
		coll, op, hasOp := strings.Cut(tail, ":")
		state, isTasks := strings.CutSuffix(coll, "_tasks")
		if !hasOp || !isTasks {
			return taskAction{}, false
		}
		a.state = state
		switch {
		case method == fiber.MethodPost && (op == "batch_delete" || op == "batch_archive" || op == "batch_run" || op == "batch_cancel"):
			a.scope, a.verb = "batch", strings.TrimPrefix(op, "batch_")
		case method == fiber.MethodDelete && op == "delete_all":
			a.scope, a.verb = "all", "delete"
		case method == fiber.MethodPost && (op == "archive_all" || op == "run_all" || op == "cancel_all"):
			a.scope, a.verb = "all", strings.TrimSuffix(op, "_all")
		default:
			return taskAction{}, false
		}
	}
	switch {
	case cancelStates[a.state] && (a.verb == "delete" || a.verb == "archive"):
		return a, true
	case a.state == "archived" && a.verb == "run", a.state == "active" && a.verb == "cancel":
		return a, true
	}
	return taskAction{}, false
}

// actions serves the wrapped calls; the rest go to next (asynqmon through apiCalls).
type actions struct {
	jobs    Jobs
	insp    *asynq.Inspector
	prefix  string // {root}/api/queues/
	timeout time.Duration
	ping    func(context.Context) error
}

// errPassThrough: the call is not about a job; asynqmon makes it.
var errPassThrough = errors.New("web: not a job's delivery")

// maxBatchBody bounds a batch's body, as asynqmon does (1 MB).
const maxBatchBody = 1_000_000

// ErrBadBatch is the answer to a batch whose body is not {"task_ids": [...]}.
var ErrBadBatch = &fiber.Error{Code: fiber.StatusBadRequest, Message: `a batch takes a JSON body {"task_ids": [...]}`}

func (a *actions) handler(next fiber.Handler) fiber.Handler {
	return func(c *fiber.Ctx) error {
		rest, ok := strings.CutPrefix(c.Path(), a.prefix)
		if !ok {
			return next(c)
		}
		act, ok := parseAction(c.Method(), rest)
		if !ok {
			return next(c)
		}
		act.queue, act.state, act.taskID = strings.Clone(act.queue), strings.Clone(act.state), strings.Clone(act.taskID)
		var ids []string
		if act.scope == "batch" {
			if len(c.Body()) > maxBatchBody {
				return ErrBadBatch
			}
			var req struct {
				TaskIDs []string `json:"task_ids"`
			}
			dec := json.NewDecoder(bytes.NewReader(c.Body()))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil {
				return ErrBadBatch
			}
			ids = req.TaskIDs // decoded into strings of their own
		}
		// As apiCalls: a change is sent only to a Redis that answers now.
		pctx, cancel := context.WithTimeout(c.UserContext(), min(pingTimeout, a.timeout))
		err := a.ping(pctx)
		cancel()
		if err != nil {
			return ErrBackendDown
		}
		// asynq's inspector takes no context: the work runs in a goroutine of its own and the
		// answer waits for it at most the timeout (the engine's calls carry the deadline).
		type result struct {
			body any
			err  error
		}
		done := make(chan result, 1)
		ctx, cancelWork := context.WithTimeout(context.WithoutCancel(c.UserContext()), a.timeout)
		go func() {
			defer cancelWork()
			body, err := a.do(ctx, act, ids)
			done <- result{body, err}
		}()
		t := time.NewTimer(a.timeout + pingTimeout)
		defer t.Stop()
		select {
		case r := <-done:
			if errors.Is(r.err, errPassThrough) {
				return next(c)
			}
			if r.err != nil {
				return r.err
			}
			if r.body == nil {
				return c.SendStatus(fiber.StatusNoContent)
			}
			return c.JSON(r.body)
		case <-t.C:
			return ErrChangeUnknown
		}
	}
}

// The answers of asynqmon's batch and "all" calls, field for field.
type (
	batchDeleted struct {
		DeletedIDs []string `json:"deleted_ids"`
		FailedIDs  []string `json:"failed_ids"`
	}
	batchArchived struct {
		ArchivedIDs []string `json:"archived_ids"`
		ErrorIDs    []string `json:"error_ids"`
	}
	batchRun struct {
		PendingIDs []string `json:"pending_ids"`
		ErrorIDs   []string `json:"error_ids"`
	}
	batchCancelled struct {
		CanceledIDs []string `json:"canceled_ids"`
		ErrorIDs    []string `json:"error_ids"`
	}
	allDeleted struct {
		Deleted int `json:"deleted"`
	}
	allArchived struct {
		Archived int `json:"archived"`
	}
	allRun struct {
		Scheduled int `json:"scheduled"`
	}
)

// do carries act out: a nil body answers 204.
func (a *actions) do(ctx context.Context, act taskAction, ids []string) (any, error) {
	switch act.scope {
	case "one":
		info, err := a.insp.GetTaskInfo(act.queue, act.taskID)
		if errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) {
			return nil, fiber.ErrNotFound // asynqmon would answer a 500 with asynq's error text
		}
		if err != nil {
			return nil, err
		}
		if handled, err := a.one(ctx, act, info); handled {
			return nil, err
		}
		return nil, errPassThrough
	case "all":
		infos, err := a.listAll(act)
		if err != nil {
			return nil, err
		}
		n := 0
		for _, info := range infos {
			if ctx.Err() != nil {
				return nil, ErrChangeUnknown
			}
			if a.each(ctx, act, info) == nil {
				n++
			}
		}
		switch act.verb {
		case "delete":
			return allDeleted{n}, nil
		case "archive":
			return allArchived{n}, nil
		case "cancel":
			return nil, nil // asynqmon's cancel_all answers 204
		}
		return allRun{n}, nil
	}
	ok, failed := make([]string, 0, len(ids)), make([]string, 0)
	for _, id := range ids {
		info, err := a.insp.GetTaskInfo(act.queue, id)
		if err == nil {
			err = a.each(ctx, act, info)
		}
		if err != nil {
			failed = append(failed, id)
		} else {
			ok = append(ok, id)
		}
	}
	switch act.verb {
	case "delete":
		return batchDeleted{DeletedIDs: ok, FailedIDs: failed}, nil
	case "archive":
		return batchArchived{ArchivedIDs: ok, ErrorIDs: failed}, nil
	case "cancel":
		return batchCancelled{CanceledIDs: ok, ErrorIDs: failed}, nil
	}
	return batchRun{PendingIDs: ok, ErrorIDs: failed}, nil
}

// listPage is how many tasks each list call of an "all" action reads.
const listPage = 500

// listAll reads every task of act's state before any is touched (acting while paging would skip
// the tasks that shift into pages already read). Tasks added meanwhile are left for the next call.
func (a *actions) listAll(act taskAction) ([]*asynq.TaskInfo, error) {
	list := map[string]func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){
		"pending": a.insp.ListPendingTasks, "scheduled": a.insp.ListScheduledTasks,
		"retry": a.insp.ListRetryTasks, "archived": a.insp.ListArchivedTasks, "active": a.insp.ListActiveTasks,
	}[act.state]
	var all []*asynq.TaskInfo
	for page := 1; ; page++ {
		infos, err := list(act.queue, asynq.Page(page), asynq.PageSize(listPage))
		if err != nil {
			return nil, err
		}
		all = append(all, infos...)
		if len(infos) < listPage {
			return all, nil
		}
	}
}

// one acts on one task when it is its job's current delivery (an archived one: any delivery of a
// job); handled is false for every other task, which gets asynq's own action.
func (a *actions) one(ctx context.Context, act taskAction, info *asynq.TaskInfo) (handled bool, err error) {
	jobID := a.jobs.JobOf(info.Headers)
	if jobID == "" {
		return false, nil
	}
	if act.verb == "run" {
		// The rules of POST /jobs/{id}/retry: only a failed job replays (409 otherwise).
		if err := a.jobs.Replay(ctx, jobID); err != nil {
			return true, err
		}
		// The replay made a delivery of its own; the dead letter is spent.
		return true, a.forget(act.queue, info.ID)
	}
	j, err := a.jobs.Job(ctx, jobID)
	if err != nil {
		return true, err
	}
	if act.verb == "cancel" && j != nil && (j.Ended || j.Delivery != info.ID) {
		// A run of a job that has ended (or moved on) is refused its writes by the fence and
		// ends by itself; asynq's cancel would end it as a failure and archive the delivery.
		return true, nil
	}
	if j == nil || j.Ended || j.Delivery != info.ID {
		return false, nil // a leftover: the engine refuses it at its start anyway
	}
	why := map[string]string{
		"delete":  "its delivery was deleted in the monitoring UI",
		"archive": "its delivery was archived in the monitoring UI",
		"cancel":  "its running delivery was cancelled in the monitoring UI",
	}[act.verb]
	if err := a.jobs.Cancel(ctx, jobID, "monitoring UI", why); err != nil {
		return true, err
	}
	if act.verb == "cancel" {
		return true, nil // the run ends when its handler returns; asynq then drops the delivery
	}
	// A cancelled job is not a dead letter: its delivery goes, whichever the verb.
	return true, a.forget(act.queue, info.ID)
}

// asynqAction is asynq's own action on a task, as asynqmon's batch and "all" calls do it.
func (a *actions) asynqAction(act taskAction, id string) error {
	switch act.verb {
	case "run":
		return a.insp.RunTask(act.queue, id)
	case "archive":
		return a.insp.ArchiveTask(act.queue, id)
	case "cancel":
		return a.insp.CancelProcessing(id)
	}
	return a.insp.DeleteTask(act.queue, id)
}

// each acts on one task of a batch or an "all" call.
func (a *actions) each(ctx context.Context, act taskAction, info *asynq.TaskInfo) error {
	handled, err := a.one(ctx, act, info)
	if !handled {
		return a.asynqAction(act, info.ID)
	}
	return err
}

// forget deletes a task that may already be gone (the cancel deletes the delivery it can), or
// that a worker has just taken: asynq refuses to delete an active task, whose run the cancel has
// already stopped (its fence raised, its lease gone), and drops it when its handler returns.
func (a *actions) forget(queue, id string) error {
	err := a.insp.DeleteTask(queue, id)
	if err == nil || errors.Is(err, asynq.ErrTaskNotFound) {
		return nil
	}
	if info, ierr := a.insp.GetTaskInfo(queue, id); ierr == nil && info.State == asynq.TaskStateActive {
		return nil
	}
	return err
}
