package app

import (
	"context"
	"maps"
	"slices"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/middleware"
)

// shardQueues spreads each queue of cfg.Queues over cfg.QueueShards shard queues (QUEUE_SHARDS;
// docs/SCALING.md): on Redis Cluster their hash tags sit on different masters, so a queue's work
// is not all on one. Nothing when QUEUE_SHARDS is 1.
func shardQueues(ctx context.Context, guard *middleware.Guard, cfg config.Config) ([]middleware.Shards, error) {
	if cfg.QueueShards <= 1 {
		return nil, nil
	}
	var out []middleware.Shards
	for _, q := range slices.Sorted(maps.Keys(cfg.Queues)) {
		s, err := guard.ShardQueue(ctx, q, cfg.QueueShards)
		if err != nil {
			return nil, &config.Error{Var: "QUEUE_SHARDS", Err: err}
		}
		out = append(out, s)
	}
	return out, nil
}
