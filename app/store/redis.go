// Package store opens what a jobguard process keeps its state in: the shared Redis client (or the
// embedded one), the PostgreSQL pool with its versioned schema (goose), and the cancel hook that
// raises a SQL-fenced task's fence. It may import app/config, the library and the task contract;
// nothing else of app, nor any example task.
package store

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/app/config"
)

// redisIOTimeout bounds one read or write on a Redis connection.
const redisIOTimeout = 3 * time.Second

// OpenRedis returns the one client this process shares between the API, asynq, asynqmon and
// jobguard's scripts, and the embedded server when none is configured (nil otherwise).
func OpenRedis(ctx context.Context, cfg config.Config, log zerolog.Logger) (redis.UniversalClient, *miniredis.Miniredis, error) {
	var embedded *miniredis.Miniredis
	opts := &redis.UniversalOptions{}
	if cfg.Embedded() {
		embedded = miniredis.NewMiniRedis()
		// Without ClockTTL miniredis never expires keys on its own; with it leases, claims and
		// retentions really run out.
		embedded.ClockTTL(true)
		if err := embedded.Start(); err != nil {
			return nil, nil, fmt.Errorf("app: start embedded redis: %w", err)
		}
		opts.Addrs = []string{embedded.Addr()}
		log.Warn().Str("redis_addr", embedded.Addr()).
			Msg("REDIS_URL is not set: using an EMBEDDED IN-MEMORY Redis; every job, lease and record is lost when this process exits. Set REDIS_URL for anything but development")
	} else {
		o, err := cfg.RedisOptions()
		if err != nil {
			return nil, nil, &config.Error{Var: "REDIS_URL", Err: config.RedactErr(err, cfg.RedisURL)}
		}
		opts = o
	}
	opts.PoolSize = cfg.PoolSize()
	// Every command honours its context's deadline (a request's REQUEST_TIMEOUT, a lease's
	// renewal budget), not only the socket timeouts: a stalled Redis gives a fast error.
	opts.ContextTimeoutEnabled = true
	// Calls that carry no deadline (asynq's inspector, asynqmon) are bounded by the socket
	// timeouts times the tries: 3 s each, 2 tries. go-redis retries a command after a timeout;
	// every jobguard script is written to be safe to run twice, and asynq's are too.
	opts.ReadTimeout, opts.WriteTimeout = redisIOTimeout, redisIOTimeout
	opts.MaxRetries = 1
	opts.ClientName = "jobguard"
	// Failover (REDIS_MODE=sentinel, cluster; no effect standalone). Every command goes to the
	// master: ReadOnly, RouteByLatency and RouteRandomly stay off, since they send reads to
	// replicas (and turn a sentinel client into a cluster-of-one client), and a replica's copy of
	// a record or lease lags the master's. The sentinel client asks the sentinels for the master,
	// follows +switch-master and drops its connections to the old address; a READONLY answer (a
	// demoted master) is retried once (MaxRetries). The cluster client follows MOVED and retries
	// connection errors and CLUSTERDOWN/READONLY through a promotion up to MaxRedirects times with
	// 8-512 ms backoff: 3 rides over a node's loss for about a second, then the request gets a
	// 503 and its client retries (chaos/failover_test.go measures it).
	if cfg.RedisMode == config.RedisCluster {
		opts.MaxRedirects = 3
	}
	rdb := redis.NewUniversalClient(opts)

	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pingCtx).Err(); err != nil {
		_ = rdb.Close()
		if embedded != nil {
			embedded.Close()
		}
		return nil, nil, fmt.Errorf("app: redis at %v does not answer: %w", opts.Addrs, err)
	}
	return rdb, embedded, nil
}
