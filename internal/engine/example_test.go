package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/redistest"
)

// reserve applies an order to a SKU's stock exactly once: the reserved total and the
// applied-order record commit together, fenced, in one script over the SKU's slot.
var reserve = engine.NewEffect(`return redis.call('HINCRBY', KEYS[1], 'reserved', ARGV[5])`)

// A complete handler: business logic only. The stack around it takes the SKU's lease, keeps it
// renewed, counts attempts, writes status and timeline fenced, and skips the handler when the
// order was applied before.
func Example() {
	ctx := context.Background()
	rdb := redistest.MustDB().Client

	stack := engine.New(rdb, engine.Config{Prefix: "shop", Concurrency: 2})
	defer stack.Close()
	stack.Register(engine.TaskConfig{Type: "reserve-stock", MaxAttempts: 3},
		func(ctx context.Context, job *engine.Job) error {
			_, err := job.Apply(ctx, reserve, job.Key("stock"), nil, 2)
			if errors.Is(err, engine.ErrAlreadyApplied) {
				return nil
			}
			return err // transient unless marked with engine.Permanent or engine.Revoked
		})

	srv := asynq.NewServerFromRedisClient(rdb, stack.ServerConfig(asynq.Config{
		Concurrency: 2, LogLevel: asynq.FatalLevel,
	}))
	if err := srv.Start(stack.Mux()); err != nil {
		panic(err)
	}
	defer srv.Shutdown()

	client := asynq.NewClientFromRedisClient(rdb)
	for i := 0; i < 2; i++ { // the same order, submitted twice
		job, err := stack.Enqueue(ctx, client, engine.Spec{
			Type: "reserve-stock", Resource: "tenant-a:sku-1", OpKey: "tenant-a:order-9",
		})
		if err != nil {
			panic(err)
		}
		for {
			v, _ := stack.Get(ctx, job.JobID)
			if s := v.Raw["status"]; s == "done" {
				fmt.Println(strings.TrimSpace(fmt.Sprint("job ", i+1, " ", s, " ", v.Raw["result"])))
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	fmt.Println("reserved:", rdb.HGet(ctx, stack.Locks().Key(engine.ResourceTag("tenant-a:sku-1"), "stock"), "reserved").Val())
	// Output:
	// job 1 done
	// job 2 done already_applied
	// reserved: 2
}
