package locking_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/locking"
)

// A worker takes the lease on a resource, keeps it renewed while it works, and writes its result
// fenced. A holder that lost the lease (it paused, and another worker took over) cannot overwrite
// the newer result.
func Example() {
	ctx := context.Background()
	rdb := redistest.MustDB().Client // any redis.UniversalClient

	locks := locking.New(rdb, locking.WithPrefix("example"))
	keeper := locks.NewKeeper()
	defer keeper.Close()

	const resource = "tenant-a:report-42"
	state := locks.Key(resource, "state") // same hash tag as the lease: one slot on a cluster

	old, _ := locks.TryAcquire(ctx, resource, 10*time.Second)
	fmt.Println("first holder, token", old.Token)

	// Say the first holder paused past its lease: a second worker now holds the resource.
	_ = old.Release(ctx)
	lease, err := locks.TryAcquire(ctx, resource, 10*time.Second)
	if err != nil {
		panic(err)
	}
	work, stop := keeper.Keep(ctx, lease) // cancelled with ErrLeaseLost if the lease is lost
	defer stop()
	fmt.Println("second holder, token", lease.Token)

	err = locks.SetFields(work, lease.Fence(), state, time.Hour, "status", "built", "rows", "1200")
	fmt.Println("second holder writes:", err)

	err = locks.SetFields(ctx, old.Fence(), state, time.Hour, "status", "failed")
	fmt.Println("first holder writes:", errors.Is(err, locking.ErrStaleToken))

	_, err = locks.TryAcquire(ctx, resource, 10*time.Second)
	fmt.Println("a third worker:", errors.Is(err, locking.ErrNotAcquired))

	fmt.Println("status:", rdb.HGet(ctx, state, "status").Val())
	// Output:
	// first holder, token 1
	// second holder, token 2
	// second holder writes: <nil>
	// first holder writes: true
	// a third worker: true
	// status: built
}
