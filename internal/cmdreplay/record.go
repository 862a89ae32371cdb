package cmdreplay

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Command is one recorded command: its arguments and the reply's shape it got.
type Command struct {
	Args []any
	// Reply is what the command answered (the value go-redis parsed, nil for a nil reply).
	Reply any
	// Failed: the command answered an error other than a nil reply.
	Failed bool
}

// Step is what one call sent: a single command, or a pipeline's (or transaction's) commands.
type Step []Command

// Recorder is a go-redis hook that keeps every step sent while it is on.
type Recorder struct {
	mu    sync.Mutex
	on    bool
	steps []Step
}

// Start discards what was recorded and records from now on.
func (r *Recorder) Start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on, r.steps = true, nil
}

// Stop stops recording and returns the steps recorded since Start, in the order they ended.
func (r *Recorder) Stop() []Step {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = false
	return r.steps
}

func (r *Recorder) keep(cmds []redis.Cmder) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.on {
		return
	}
	step := make(Step, 0, len(cmds))
	for _, c := range cmds {
		cmd := Command{Args: append([]any(nil), c.Args()...)}
		if err := c.Err(); err != nil && err != redis.Nil {
			cmd.Failed = true
		}
		if v, ok := c.(interface{ Val() any }); ok {
			cmd.Reply = v.Val()
		}
		step = append(step, cmd)
	}
	r.steps = append(r.steps, step)
}

// DialHook implements redis.Hook.
func (r *Recorder) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (r *Recorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		r.keep([]redis.Cmder{cmd})
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (r *Recorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		r.keep(cmds)
		return err
	}
}

var _ redis.Hook = (*Recorder)(nil)
