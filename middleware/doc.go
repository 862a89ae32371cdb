// Package middleware is jobguard as asynq middleware: mount it on the asynq server an
// application already runs, and the task types it is told about run under leases with batched
// heartbeats and fencing tokens, with effects applied once, and come back within about the lease
// TTL when their worker dies or pauses. Producers, handlers, other middleware and the retry
// policy stay the application's.
//
//	guard := middleware.New(rdb, middleware.Config{})
//	guard.ProtectLease("stock:reserve", middleware.Lease{Resource: skuOf})
//	mux.Use(guard.Middleware())
//	srv := asynq.NewServerFromRedisClient(rdb, guard.ServerConfig(cfg))
//	go guard.Run(ctx)
//
// # Two levels, chosen per task type
//
// Lease level (ProtectLease) is for tasks any producer enqueues with a plain asynq client. Each
// delivery takes its resource's lease (Lease.Resource names it from the task) before the handler
// runs and releases it after; the handler finds its Run with RunFrom.
//   - At most one run per resource holds the lease at a time, across every process. A delivery
//     that finds it held waits (a bounce: asynq retries it in 1-2 s without counting a failure).
//   - Every acquisition draws a fencing token above every earlier one of the resource; writes made
//     with Run.Fence (Locks().SetValue, SetFields, a FencedScript, Run.Apply, a SQL fence) are
//     refused once a newer token was drawn, so a run that lost its lease cannot overwrite newer state.
//   - Run.Apply commits an effect and its applied-operation record together: once per op key (by
//     default the asynq task id, kept across retries and rescues) for as long as AppliedTTL.
//   - Guard.Run's rescuer hands the task of a run whose lease lapsed (its worker died, or paused past
//     the lease) to a copy within about the lease TTL plus RescueInterval; asynq's own recovery
//     takes 60-120 s. asynq's later redelivery of the original is acknowledged without running.
//   - Lease.Limit bounds runs per key (a tenant, an upstream host: LeaseLimit.Key of the task)
//     across every process: at most Concurrency at once, zombies included, and Rate starts per
//     Per. A delivery takes a slot of its key before its lease; over the limit it bounces (no
//     failure), or on its last retry waits for a slot in the process. A slot that lapses (its
//     holder cut off from Redis) cancels the handler's context (cause ErrSlotLost) before Redis
//     gives it to another, and Run.ValidFor counts it.
//   - Attempts, retry delays and the archive stay asynq's and the application's.
//
// Job level (ProtectJob) is jobguard's full engine for tasks enqueued through Guard.Enqueue: a job
// record with status and timeline, attempts counted by jobguard (bounces never spend one), its own
// backoff, dedup policies, Idempotency/op keys, cancel, progress, checkpoints, start-by deadlines and
// limits per key, with the lease level's guarantees. A job-level task enqueued with a plain asynq
// client runs at lease level, logged and counted (jobguard_unadopted_total): never archived for it.
//
// Job.Fair dispatches a job-level type fairly: its jobs wait per key in Redis (status waiting) and
// are admitted into asynq in weighted round-robin as its Capacity frees, with limits per key that
// wait instead of bouncing and sequences (one job per key at a time, in order). See Fair.
//
// # Sharded queues (Redis Cluster)
//
// asynq keeps every key of a queue under one hash tag, so on Redis Cluster one queue is dequeued and
// completed on one master however many there are. Guard.ShardQueue spreads a logical queue over n
// shard queues whose hash tags sit on different masters (picked from the cluster's slot map, recorded
// in Redis so that every process and restart agrees; the first shard is the queue itself). A
// job-level type's jobs go to their resource's shard (a resource's jobs stay on one shard, and its
// scripts in its own slot); a lease-level producer sends to Shards.For(resource). Workers serve every
// shard with asynq.Config.Queues from ServerQueues, which keeps the shares (or the strict order)
// between logical queues. Status, Cancel and the lists find a job by its id whatever its shard.
//
//	shards, err := guard.ShardQueue(ctx, "default", 6)
//	cfg.Queues = middleware.ServerQueues(map[string]int{"critical": 6, "default": 3}, cfg.StrictPriority, shards)
//
// A fairly dispatched type's admission state is one slot too; Fair.Shards spreads it over n slots,
// each admitting its share of the Capacity (a key's jobs wait in one of them, in order).
//
// # What it does not guarantee
//
// A lease is not proof of exclusivity: a paused process, or a Redis failover with asynchronous
// replication, can let two runs believe they hold one resource for a moment. The fence is what
// keeps the older from overwriting the newer; the handler must carry it to every write that
// matters. A handler's side effects outside Redis and SQL (an e-mail, an HTTP call) are at least
// once unless the receiver takes an idempotency key (Run.OpKey). Records of applied operations are
// kept for AppliedTTL (default for ever); job records for Config.Retention (default 7 days).
package middleware
