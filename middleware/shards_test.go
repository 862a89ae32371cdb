package middleware_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/middleware"
)

// masterOf is the address of the master that serves asynq's keys of queue, as the cluster says.
func masterOf(t *testing.T, c *redis.ClusterClient, queue string) string {
	t.Helper()
	m, err := c.MasterForKey(ctx, "asynq:{"+queue+"}:pending")
	if err != nil {
		t.Fatal(err)
	}
	return m.Options().Addr
}

// On a cluster of three masters, three shards land one on each master; a restarted process
// finds the same names; six put two on each, the first three kept; two retire the last four,
// which the workers still serve.
func TestShardQueueSpreadsOverEveryMaster(t *testing.T) {
	t.Parallel()
	db := redistest.NewCluster(t)
	queue := db.Prefix + "-orders"
	g := middleware.New(db.Client, middleware.Config{Prefix: db.Prefix})
	defer g.Close()
	three, err := g.ShardQueue(ctx, queue, 3)
	if err != nil {
		t.Fatal(err)
	}
	perMaster := func(names []string) map[string]int {
		n := map[string]int{}
		for _, q := range names {
			n[masterOf(t, db.Client, q)]++
		}
		return n
	}
	if got := perMaster(three.Names); len(three.Names) != 3 || three.Names[0] != queue || len(got) != 3 {
		t.Fatalf("3 shards %v on masters %v: want the queue first, one per master", three.Names, got)
	}

	restarted := middleware.New(db.Client, middleware.Config{Prefix: db.Prefix})
	defer restarted.Close()
	again, err := restarted.ShardQueue(ctx, queue, 3)
	if err != nil || !slices.Equal(again.Names, three.Names) {
		t.Fatalf("after a restart: %v (%v), want %v", again.Names, err, three.Names)
	}

	six, err := restarted.ShardQueue(ctx, queue, 6)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(six.Names[:3], three.Names) {
		t.Fatalf("6 shards %v do not keep the first 3 %v", six.Names, three.Names)
	}
	for addr, n := range perMaster(six.Names) {
		if n != 2 {
			t.Fatalf("6 shards %v: master %s holds %d, want 2 each", six.Names, addr, n)
		}
	}

	two, err := g.ShardQueue(ctx, queue, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(two.Names, six.Names[:2]) || !slices.Equal(two.Retired, six.Names[2:]) {
		t.Fatalf("2 shards: names %v retired %v, want %v and %v", two.Names, two.Retired, six.Names[:2], six.Names[2:])
	}
	served := middleware.ServerQueues(map[string]int{queue: 1}, false, two)
	if got := slices.Sorted(maps.Keys(served)); !slices.Equal(got, slices.Sorted(slices.Values(six.Names))) {
		t.Fatalf("servers serve %v, want every recorded shard %v", got, six.Names)
	}
}

// Job-level jobs of a sharded queue on a cluster run on their resource's shard, every shard
// serving some; Status and Cancel find a job by its id whatever its shard.
func TestShardedQueueRunsEachResourceOnItsShard(t *testing.T) {
	t.Parallel()
	db := redistest.NewCluster(t)
	queue := db.Prefix + "-ship"
	g := middleware.New(db.Client, middleware.Config{Prefix: db.Prefix})
	defer g.Close()
	g.ProtectJob("ship", middleware.Job{Queue: queue, MaxAttempts: 3})
	shards, err := g.ShardQueue(ctx, queue, 3)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ranOn := map[string]map[string]bool{} // resource -> queues its jobs ran on
	mux := asynq.NewServeMux()
	mux.Use(g.Middleware())
	mux.HandleFunc("ship", func(ctx context.Context, task *asynq.Task) error {
		q, _ := asynq.GetQueueName(ctx)
		mu.Lock()
		defer mu.Unlock()
		if ranOn[string(task.Payload())] == nil {
			ranOn[string(task.Payload())] = map[string]bool{}
		}
		ranOn[string(task.Payload())][q] = true
		return nil
	})
	cfg := g.ServerConfig(asynq.Config{Concurrency: 4, LogLevel: asynq.FatalLevel,
		Queues: middleware.ServerQueues(map[string]int{queue: 1}, false, shards)})
	srv := asynq.NewServerFromRedisClient(db.Client, cfg)
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()

	// Resources until every shard has two of them.
	var resources []string
	covered := map[string]int{}
	for i := 0; len(covered) < 3 || slices.Min(slices.Collect(maps.Values(covered))) < 2; i++ {
		r := fmt.Sprintf("parcel-%d", i)
		resources = append(resources, r)
		covered[shards.For(r)]++
	}
	var ids []string
	for _, r := range resources {
		for range 2 {
			e, err := g.Enqueue(ctx, asynq.NewTask("ship", []byte(r)), middleware.EnqueueOptions{Tenant: "acme", Resource: r})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, e.JobID)
		}
	}
	eventually(t, 20*time.Second, "every job done", func() bool {
		for _, id := range ids {
			if st, err := g.Status(ctx, id); err != nil || st.Status != "done" {
				return false
			}
		}
		return true
	})
	mu.Lock()
	for _, r := range resources {
		if want := shards.For(r); len(ranOn[r]) != 1 || !ranOn[r][want] {
			t.Errorf("resource %s ran on %v, want only its shard %s", r, ranOn[r], want)
		}
	}
	mu.Unlock()

	// A waiting job on the last shard: cancelled by id, its delivery leaves that shard.
	var late string
	for i := 0; late == ""; i++ {
		if r := fmt.Sprintf("late-%d", i); shards.For(r) == shards.Names[2] {
			late = r
		}
	}
	insp := asynq.NewInspectorFromRedisClient(db.Client)
	e, err := g.Enqueue(ctx, asynq.NewTask("ship", []byte(late)), middleware.EnqueueOptions{Resource: late, ProcessIn: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if qi, err := insp.GetQueueInfo(shards.Names[2]); err != nil || qi.Scheduled != 1 {
		t.Fatalf("shard %s before the cancel: %+v, %v; want 1 scheduled", shards.Names[2], qi, err)
	}
	if err := g.Cancel(ctx, e.JobID, "test", "no longer wanted"); err != nil {
		t.Fatal(err)
	}
	if st, err := g.Status(ctx, e.JobID); err != nil || st.Status != "cancelled" {
		t.Fatalf("status after the cancel: %+v, %v", st, err)
	}
	if qi, err := insp.GetQueueInfo(shards.Names[2]); err != nil || qi.Scheduled != 0 {
		t.Fatalf("shard %s after the cancel: %+v, %v; want its delivery deleted", shards.Names[2], qi, err)
	}
}

// On one Redis the shards share it and still route: a job waits in its resource's shard.
func TestShardQueueOnOneRedis(t *testing.T) {
	t.Parallel()
	b := setup(t, middleware.Config{})
	b.guard.ProtectJob("mail", middleware.Job{Queue: "mail"})
	shards, err := b.guard.ShardQueue(ctx, "mail", 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(shards.Names) != 4 || shards.Names[0] != "mail" || len(slices.Compact(slices.Sorted(slices.Values(shards.Names)))) != 4 {
		t.Fatalf("names %v: want 4 distinct, the queue first", shards.Names)
	}
	for _, r := range []string{"alice", "bob", "carol", "dave", "erin"} {
		if _, err := b.guard.Enqueue(ctx, asynq.NewTask("mail", nil), middleware.EnqueueOptions{Resource: r, ProcessIn: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int{}
	for _, r := range []string{"alice", "bob", "carol", "dave", "erin"} {
		want[shards.For(r)]++
	}
	for q, n := range want {
		if qi, err := b.insp.GetQueueInfo(q); err != nil || qi.Scheduled != n {
			t.Fatalf("shard %s: %+v, %v; want %d scheduled", q, qi, err, n)
		}
	}
	if _, err := b.guard.ShardQueue(ctx, "mail", 0); err == nil {
		t.Fatal("0 shards accepted")
	}
}

// ServerQueues keeps the shares between logical queues: without strict priority a sharded queue's
// shards split its priority; with it each shard keeps its queue's, so the order between queues holds.
func TestServerQueuesKeepsTheSharesBetweenQueues(t *testing.T) {
	t.Parallel()
	def := middleware.Shards{Queue: "default", Names: []string{"default", "default~1", "default~4"}}
	low := middleware.Shards{Queue: "low", Names: []string{"low", "low~2"}}
	queues := map[string]int{"critical": 6, "default": 3, "low": 1}
	got := middleware.ServerQueues(queues, false, def, low)
	sum := func(names []string) int {
		n := 0
		for _, q := range names {
			n += got[q]
		}
		return n
	}
	c, d, l := got["critical"], sum(def.Names), sum(low.Names)
	if len(got) != 6 || c*1 != l*6 || d*1 != l*3 || got["default~1"] != got["default"] {
		t.Fatalf("priorities %v: shares critical %d default %d low %d, want 6:3:1 with equal shards", got, c, d, l)
	}
	strict := middleware.ServerQueues(queues, true, def, low)
	want := map[string]int{"critical": 6, "default": 3, "default~1": 3, "default~4": 3, "low": 1, "low~2": 1}
	if !maps.Equal(strict, want) {
		t.Fatalf("strict priorities %v, want %v", strict, want)
	}
}
