package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hibiken/asynq"
)

// A fairly dispatched type without a Capacity of its own admits as many jobs as there are
// handlers to run them: the concurrency of the live asynq servers that serve its queue, summed
// over every process. One process's Concurrency, the default before, left the other workers'
// handlers idle: on three workers of 4 handlers, a lone key ran 4 jobs at once, not 12. Every
// worker's sweep may count the handlers from asynq's list of live servers (their heartbeats come
// every 5 s); one claims each period's count for the fleet, since the list carries every active
// task's payload. It writes each shard's share into the shard's slot, where the admission scripts
// read it (so a process that only enqueues admits by the same count). The count expires when no
// sweep runs, and the enqueuing process's Concurrency stands in for it until one does. A server
// counts if it serves the type's queue, whether or not its mux handles the type.

const (
	// fairHandlersEvery is how often the live handlers are counted (asynq's heartbeat).
	fairHandlersEvery = 5 * time.Second
	// fairHandlersTTL is how long a count stands without a sweep to renew it.
	fairHandlersTTL = 30 * time.Second
)

// fairHandlersClock spaces one process's counts.
type fairHandlersClock struct {
	mu   sync.Mutex
	last time.Time
}

// due says whether a count is due at now, and if so takes it.
func (c *fairHandlersClock) due(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.last.IsZero() && now.Sub(c.last) < fairHandlersEvery {
		return false
	}
	c.last = now
	return true
}

// refreshFairHandlers writes, for each of types that has no Capacity of its own, its shards' shares
// of the live handlers that serve it, when this process's claim of the period's count wins. A type
// no live server serves keeps its last count until it expires.
func (s *Stack) refreshFairHandlers(ctx context.Context, types []TaskConfig) error {
	auto := slices.DeleteFunc(slices.Clone(types), func(tc TaskConfig) bool { return tc.Fair.Capacity > 0 })
	if len(auto) == 0 || !s.fairHandlers.due(time.Now()) {
		return nil
	}
	if won, err := s.store.FairClaimCount(ctx, fairHandlersEvery); err != nil || !won {
		return err
	}
	servers, err := asynq.NewInspectorFromRedisClient(s.rdb).Servers()
	if err != nil {
		return fmt.Errorf("engine: live servers: %w", err)
	}
	for _, tc := range auto {
		n := handlersServing(servers, s.typeQueues(tc))
		if n == 0 {
			continue
		}
		for _, sh := range s.fairShardsOf(tc) {
			if err := s.store.FairSetHandlers(ctx, sh, shardCapacity(n, sh), fairHandlersTTL); err != nil {
				return fmt.Errorf("engine: %w", err)
			}
		}
	}
	return nil
}

// handlersServing is the concurrency of the active servers (not shutting down) that serve one of
// queues: a server's handlers run whichever of its queues has work, so each counts once.
func handlersServing(servers []*asynq.ServerInfo, queues []string) int {
	n := 0
	for _, srv := range servers {
		if srv.Status != "active" {
			continue
		}
		for _, q := range queues {
			if _, ok := srv.Queues[q]; ok {
				n += srv.Concurrency
				break
			}
		}
	}
	return n
}

// typeQueues are the asynq queues tc's deliveries go to: its queue, or its queue's shards.
func (s *Stack) typeQueues(tc TaskConfig) []string {
	t := &s.shards
	t.mu.RLock()
	defer t.mu.RUnlock()
	if names := t.shards[tc.Queue]; len(names) > 0 {
		return slices.Clone(names)
	}
	return []string{tc.Queue}
}
