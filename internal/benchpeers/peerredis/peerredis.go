// Package peerredis is the Redis client of the Redis-backed peers of make bench-peers (bare asynq
// and both jobguard levels), kept out of package peer, which River's peer imports from a module
// of its own and which uses the standard library only.
package peerredis

import (
	"context"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/benchpeers/peer"
)

// TaskType is the task type of the Redis-backed peers' benchmark job.
const TaskType = "noop"

// Open reads the peer's flags and opens its Redis client and an asynq client over it: how every
// Redis-backed peer's main begins.
func Open() (peer.Flags, *redis.Client, *asynq.Client) {
	f := peer.ParseFlags()
	rdb := Client(f)
	return f, rdb, asynq.NewClientFromRedisClient(rdb)
}

// Enqueue is the producer of the peers that enqueue with a plain asynq client (bare asynq, the
// lease level): a TaskType task of body.
func Enqueue(client *asynq.Client) func(context.Context, []byte) error {
	return func(ctx context.Context, body []byte) error {
		_, err := client.EnqueueContext(ctx, asynq.NewTask(TaskType, body))
		return err
	}
}

// Client is the peer process's one client to the Redis at f.URL, pooled as the side-by-side
// benchmark's (two connections a handler, and ten).
func Client(f peer.Flags) *redis.Client {
	opt, err := redis.ParseURL(f.URL)
	if err != nil {
		panic(err)
	}
	opt.PoolSize = 2*f.Concurrency + 10
	return redis.NewClient(opt)
}
