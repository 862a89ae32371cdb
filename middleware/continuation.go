package middleware

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
)

// A lease-level task's work passes to a copy (a continuation) when its run is lost (the rescuer)
// or when, on its last retry, it must wait (a hand-off: asynq archives a task whose retries are
// spent before it asks IsFailure, so a bounce there would be a failure). The copy carries the
// same payload, names the task it continues and the first task of the chain; the task it
// continues is marked superseded, so that its later deliveries are acknowledged without running.

// Task headers of a continuation.
const (
	// headerRescueOf names the task a continuation continues.
	headerRescueOf = "jobguard-rescue-of"
	// headerOpRoot is the first task of a chain of continuations: the default op key.
	headerOpRoot = "jobguard-op-root"
)

// copySuffix joins a continuation's id to its chain's first task's: "<first>~r<random>". Two
// rescuers racing make two copies; the one whose commit lost finds its original not superseded by
// it and is acknowledged without running.
const copySuffix = "~r"

// continues is the task a continuation continues, "" for any other task. The headers are trusted
// only on a task whose id was derived from them: a producer that copied a copy's headers onto a
// new task, or wrote them, makes no copy of it.
func continues(t *asynq.Task, taskID string) string {
	root, prev := t.Headers()[headerOpRoot], t.Headers()[headerRescueOf]
	if root == "" || prev == "" || !strings.HasPrefix(taskID, root+copySuffix) {
		return ""
	}
	if prev != root && !strings.HasPrefix(prev, root+copySuffix) {
		return ""
	}
	return prev
}

// rootOf is the first task of t's chain (t's own id for a task that is no continuation).
func rootOf(t *asynq.Task, taskID string) string {
	if continues(t, taskID) != "" {
		return t.Headers()[headerOpRoot]
	}
	return taskID
}

// enqueueContinuation enqueues the continuation of task taskID (t its type, payload and headers)
// with opts, and returns its id.
func (g *Guard) enqueueContinuation(ctx context.Context, t *asynq.Task, taskID string, opts ...asynq.Option) (string, error) {
	c, copyID := continuation(t, taskID)
	_, err := g.client.EnqueueContext(ctx, c, append(opts, asynq.TaskID(copyID))...)
	return copyID, err
}

// continuation is the task that continues t (task taskID), and its id.
func continuation(t *asynq.Task, taskID string) (*asynq.Task, string) {
	headers := make(map[string]string, len(t.Headers())+2)
	for k, v := range t.Headers() {
		headers[k] = v
	}
	root := rootOf(t, taskID)
	headers[headerOpRoot], headers[headerRescueOf] = root, taskID
	return asynq.NewTaskWithHeaders(t.Type(), t.Payload(), headers), root + copySuffix + strconv.FormatUint(rand.Uint64()&0xffffff, 36)
}

// handOff gives a task on its last retry a continuation that asynq delivers after delay, in
// place of the bounce asynq would archive as a failure: the task's marker says superseded by the
// continuation first (so that the continuation, which may come at once, finds it handed over),
// then the continuation is enqueued; when that fails, the marker is taken back and the bounce
// stands (the task is archived, visibly).
func (g *Guard) handOff(ctx context.Context, t *asynq.Task, k leaseKeys, delay time.Duration) error {
	taskID, _ := asynq.GetTaskID(ctx)
	c, copyID := continuation(t, taskID)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	if err := g.rdb.Set(wctx, k.marker, "superseded:"+copyID, supersededTTL).Err(); err != nil {
		return err
	}
	queue, _ := asynq.GetQueueName(ctx)
	opts := []asynq.Option{asynq.TaskID(copyID), asynq.Queue(queue), asynq.MaxRetry(0), asynq.ProcessIn(delay)}
	if _, err := g.client.EnqueueContext(wctx, c, opts...); err != nil {
		g.rdb.Del(wctx, k.marker)
		return err
	}
	return nil
}

// lastRetry reports whether the delivery in ctx is its task's last: asynq archives it on any error.
func lastRetry(ctx context.Context) bool {
	retried, _ := asynq.GetRetryCount(ctx)
	maxRetry, _ := asynq.GetMaxRetry(ctx)
	return retried >= maxRetry
}
