package testsupport

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// RoundTrips is a go-redis hook that counts a client's round trips: one per command sent alone,
// one per pipeline (sent in one write, its answers read together). A new connection's set-up
// (HELLO, SELECT, CLIENT, AUTH) is not counted. Add it with client.AddHook.
type RoundTrips struct{ n atomic.Int64 }

// N is how many round trips the client has made since the hook was added.
func (h *RoundTrips) N() int64 { return h.n.Load() }

// DialHook passes dials through.
func (h *RoundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts a command sent alone.
func (h *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !setUp(cmd) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts a pipeline once.
func (h *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && !setUp(cmds[0]) {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

func setUp(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "select", "client", "auth":
		return true
	}
	return false
}

// PipelinesOnly lets dials and single commands through: a go-redis hook that embeds it acts on
// pipelines only (its own ProcessPipelineHook).
type PipelinesOnly struct{}

// DialHook passes dials through.
func (PipelinesOnly) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook passes single commands through.
func (PipelinesOnly) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
