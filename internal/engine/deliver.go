package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
)

// deliver enqueues one delivery of job id on asynq (in its shard of the type's queue), with the
// headers that name the job. The task's payload is empty: the job record's is authoritative
// (asynqmon shows the headers).
func (s *Stack) deliver(ctx context.Context, client *asynq.Client, tc TaskConfig, id, delivery, opKey, dedup string, extra map[string]string, delay time.Duration) error {
	return s.deliverTo(ctx, client, tc, s.queueOf(tc.Queue, id), id, delivery, opKey, dedup, extra, delay)
}

// deliverTo is deliver to asynq queue queue: the one the job's record names, for a job that has
// one (shards.go: recordQueue).
func (s *Stack) deliverTo(ctx context.Context, client *asynq.Client, tc TaskConfig, queue, id, delivery, opKey, dedup string, extra map[string]string, delay time.Duration) error {
	headers := map[string]string{HeaderJobID: id, HeaderPrefix: s.cfg.Prefix}
	if opKey != "" {
		headers[HeaderOpKey] = opKey
	}
	if dedup != "" {
		headers[HeaderDedup] = dedup
	}
	for k, v := range extra {
		headers[k] = v
	}
	opts := []asynq.Option{asynq.TaskID(delivery), asynq.Queue(queue), asynq.MaxRetry(asynqRetryAllowance)}
	if tc.Timeout > 0 {
		opts = append(opts, asynq.Timeout(tc.Timeout))
	}
	if delay > 0 {
		opts = append(opts, asynq.ProcessIn(delay))
	}
	// The task's payload is informational (asynqmon shows it); the job record's is authoritative.
	if _, err := client.EnqueueContext(ctx, asynq.NewTaskWithHeaders(tc.Type, nil, headers), opts...); err != nil {
		return fmt.Errorf("engine: enqueue delivery %s: %w", delivery, err)
	}
	return nil
}
