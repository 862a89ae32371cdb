package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/middleware"
)

// reserve adds to a SKU's reserved stock once per operation: the total and the applied-operation
// record commit together, fenced, in one script over the SKU's slot.
var reserve = middleware.NewEffect(`return redis.call('HINCRBY', KEYS[1], 'reserved', ARGV[5])`)

// An asynq application keeps its server, mux, handlers, producer and retry policy; the guard is
// mounted as one more middleware, and its lease-level type's producer stays a plain Enqueue.
func Example() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	opt, _ := redis.ParseURL(os.Getenv("REDIS_URL")) // e.g. redis://localhost:6379/0
	rdb := redis.NewClient(opt)
	defer rdb.Close()

	guard := middleware.New(rdb, middleware.Config{Prefix: "shop"})
	defer guard.Close()
	guard.ProtectLease("stock:reserve", middleware.Lease{
		// One run per SKU at a time, across every worker.
		Resource: func(t *asynq.Task) (string, error) { return "sku:" + string(t.Payload()), nil },
	})

	mux := asynq.NewServeMux()
	mux.Use(guard.Middleware())
	mux.HandleFunc("stock:reserve", func(ctx context.Context, t *asynq.Task) error {
		run, _ := middleware.RunFrom(ctx)
		_, err := run.Apply(ctx, reserve, run.Key("stock"), nil, 2)
		if errors.Is(err, middleware.ErrAlreadyApplied) {
			return nil // a redelivery of work already done
		}
		return err
	})
	srv := asynq.NewServerFromRedisClient(rdb, guard.ServerConfig(asynq.Config{
		Concurrency: 4, LogLevel: asynq.FatalLevel,
		RetryDelayFunc: func(n int, err error, t *asynq.Task) time.Duration { return time.Second },
	}))
	if err := srv.Start(mux); err != nil {
		panic(err)
	}
	defer srv.Shutdown()
	go guard.Run(ctx) // rescues the tasks of dead or paused workers

	client := asynq.NewClientFromRedisClient(rdb)
	if _, err := client.Enqueue(asynq.NewTask("stock:reserve", []byte("42"))); err != nil {
		panic(err)
	}
	for rdb.HGet(ctx, "shop:{sku:42}:stock", "reserved").Val() == "" {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("reserved:", rdb.HGet(ctx, "shop:{sku:42}:stock", "reserved").Val())
	// Output: reserved: 2
}

// A lease-level type limited per key: at most two deliveries to one host at once and ten starts
// per second, across every worker; a delivery over the limit waits without failing.
func ExampleLeaseLimit() {
	opt, _ := redis.ParseURL(os.Getenv("REDIS_URL"))
	rdb := redis.NewClient(opt)
	defer rdb.Close()

	guard := middleware.New(rdb, middleware.Config{Prefix: "hooks"})
	defer guard.Close()
	guard.ProtectLease("webhook:deliver", middleware.Lease{
		Resource: func(t *asynq.Task) (string, error) { return "hook:" + string(t.Payload()), nil },
		Limit: middleware.LeaseLimit{
			Key:         func(t *asynq.Task) string { host, _, _ := strings.Cut(string(t.Payload()), "/"); return host },
			Concurrency: 2, Rate: 10, Per: time.Second,
		},
	})

	tokens := make(chan int64, 1)
	mux := asynq.NewServeMux()
	mux.Use(guard.Middleware())
	mux.HandleFunc("webhook:deliver", func(ctx context.Context, t *asynq.Task) error {
		run, _ := middleware.RunFrom(ctx)
		tokens <- run.LimitToken() // the slot's token: an upstream may refuse an older holder
		return nil
	})
	srv := asynq.NewServerFromRedisClient(rdb, guard.ServerConfig(asynq.Config{Concurrency: 4, LogLevel: asynq.FatalLevel}))
	if err := srv.Start(mux); err != nil {
		panic(err)
	}
	defer srv.Shutdown()

	client := asynq.NewClientFromRedisClient(rdb)
	if _, err := client.Enqueue(asynq.NewTask("webhook:deliver", []byte("example.com/orders/7"))); err != nil {
		panic(err)
	}
	fmt.Println("ran holding a slot of example.com:", <-tokens > 0)
	// Output: ran holding a slot of example.com: true
}

// A job-level type dispatched fairly: each tenant's jobs run one at a time, in the order they
// were enqueued (a sequence), whatever the other tenants queue.
func ExampleFair() {
	opt, _ := redis.ParseURL(os.Getenv("REDIS_URL"))
	rdb := redis.NewClient(opt)
	defer rdb.Close()

	guard := middleware.New(rdb, middleware.Config{Prefix: "ledger"})
	defer guard.Close()
	guard.ProtectJob("ledger:post", middleware.Job{Queue: "ledger", Fair: &middleware.Fair{Sequence: true, Capacity: 4}})

	posted := make(chan string, 3)
	mux := asynq.NewServeMux()
	mux.Use(guard.Middleware())
	mux.HandleFunc("ledger:post", func(ctx context.Context, t *asynq.Task) error {
		posted <- string(t.Payload())
		return nil
	})
	srv := asynq.NewServerFromRedisClient(rdb, guard.ServerConfig(asynq.Config{Concurrency: 4, LogLevel: asynq.FatalLevel,
		Queues: map[string]int{"ledger": 1}}))
	if err := srv.Start(mux); err != nil {
		panic(err)
	}
	defer srv.Shutdown()

	for _, entry := range []string{"open", "credit", "close"} {
		o := middleware.EnqueueOptions{Tenant: "acme"} // the fair key: the tenant
		if _, err := guard.Enqueue(context.Background(), asynq.NewTask("ledger:post", []byte(entry)), o); err != nil {
			panic(err)
		}
	}
	fmt.Println(<-posted, <-posted, <-posted)
	// Output: open credit close
}

// A logical queue spread over three shard queues: on Redis Cluster their hash tags sit on three
// masters (one Redis here, which they share). A job goes to its resource's shard; the server
// serves every shard, the shares between logical queues kept.
func ExampleGuard_ShardQueue() {
	ctx := context.Background()
	opt, _ := redis.ParseURL(os.Getenv("REDIS_URL")) // a *redis.ClusterClient in production
	rdb := redis.NewClient(opt)
	defer rdb.Close()

	guard := middleware.New(rdb, middleware.Config{Prefix: "fleet"})
	defer guard.Close()
	guard.ProtectJob("parcel:ship", middleware.Job{Queue: "parcels"})
	shards, err := guard.ShardQueue(ctx, "parcels", 3) // same names in every process, every restart
	if err != nil {
		panic(err)
	}

	done := make(chan string, 1)
	mux := asynq.NewServeMux()
	mux.Use(guard.Middleware())
	mux.HandleFunc("parcel:ship", func(ctx context.Context, t *asynq.Task) error {
		queue, _ := asynq.GetQueueName(ctx)
		done <- queue
		return nil
	})
	srv := asynq.NewServerFromRedisClient(rdb, guard.ServerConfig(asynq.Config{
		Concurrency: 2, LogLevel: asynq.FatalLevel,
		Queues: middleware.ServerQueues(map[string]int{"parcels": 3, "mail": 1}, false, shards),
	}))
	if err := srv.Start(mux); err != nil {
		panic(err)
	}
	defer srv.Shutdown()

	if _, err := guard.Enqueue(ctx, asynq.NewTask("parcel:ship", nil), middleware.EnqueueOptions{Resource: "parcel:7"}); err != nil {
		panic(err)
	}
	fmt.Println("shards:", len(shards.Names), "ran on its resource's shard:", <-done == shards.For("parcel:7"))
	// Output: shards: 3 ran on its resource's shard: true
}
