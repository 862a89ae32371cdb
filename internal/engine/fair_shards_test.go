package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// shardRecorder records the runs of a sequence type whose payloads are "<key>:<step>": each key's
// order, the runs that overlapped another of their key, the most runs at once, and the shards the
// deliveries named.
type shardRecorder struct {
	mu                  sync.Mutex
	order               map[string][]int
	running             map[string]int
	overlaps, now, peak int
	shards              map[string]bool
}

func newShardRecorder() *shardRecorder {
	return &shardRecorder{order: map[string][]int{}, running: map[string]int{}, shards: map[string]bool{}}
}

func (r *shardRecorder) handle(ctx context.Context, j *Job) error {
	key, step, _ := strings.Cut(string(j.Payload), ":")
	n, _ := strconv.Atoi(step)
	r.mu.Lock()
	r.running[key]++
	r.now++
	r.peak = max(r.peak, r.now)
	if r.running[key] > 1 {
		r.overlaps++
	}
	r.shards[j.Headers[HeaderFairShard]] = true
	r.mu.Unlock()
	time.Sleep(3 * time.Millisecond)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running[key]--
	r.now--
	r.order[key] = append(r.order[key], n)
	return nil
}

// check fails t unless every key of keys ran steps 0..steps-1 in order, none overlapped, and at
// most capacity ran at once.
func (r *shardRecorder) check(t *testing.T, keys []string, steps, capacity int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	want := make([]int, steps)
	for i := range want {
		want[i] = i
	}
	for _, k := range keys {
		if !slices.Equal(r.order[k], want) {
			t.Errorf("key %s ran %v, want %v", k, r.order[k], want)
		}
	}
	if r.overlaps != 0 {
		t.Errorf("%d runs overlapped another of their key", r.overlaps)
	}
	if r.peak > capacity {
		t.Errorf("%d ran at once, over the capacity %d", r.peak, capacity)
	}
}

// keysOverShards are n keys of tc that cover every shard of it.
func keysOverShards(s *Stack, tc TaskConfig, n int) []string {
	var keys []string
	seen := map[int]bool{}
	for i := 0; len(keys) < n || len(seen) < s.fairShards(tc); i++ {
		k := fmt.Sprint("k", i)
		if sh := s.fairShardOf(tc, k).Index; len(keys) < n || !seen[sh] {
			seen[sh] = true
			keys = append(keys, k)
		}
	}
	return keys
}

// A type spread over shards keeps each key's order and the type's capacity: each shard admits its
// share, each delivery names its shard, and every end frees its admission there.
func TestFairShardsKeepOrderAndCapacity(t *testing.T) {
	t.Parallel()
	rec := newShardRecorder()
	tc := TaskConfig{Type: "seq-sharded", Fair: &Fair{Sequence: true, Capacity: 5, Shards: 3}}
	h := newHarness(t, Config{Concurrency: 8}, func(s *Stack) { s.Register(tc, rec.handle) })
	if got := shardCapacity(5, jobstore.FairShard{Index: 0, Of: 3}) + shardCapacity(5, jobstore.FairShard{Index: 1, Of: 3}) +
		shardCapacity(5, jobstore.FairShard{Index: 2, Of: 3}); got != 5 {
		t.Fatalf("the shards' capacities sum to %d, want 5", got)
	}
	keys := keysOverShards(h.stack, tc, 9)
	var last []string
	for step := range 4 {
		for _, k := range keys {
			last = append(last, h.enqueue(Spec{Type: tc.Type, Tenant: k, Payload: fmt.Appendf(nil, "%s:%d", k, step)}))
		}
	}
	for _, id := range last {
		h.waitStatus(id, "done", 30*time.Second)
	}
	rec.check(t, keys, 4, 5)
	if !rec.shards["0/3"] || !rec.shards["1/3"] || !rec.shards["2/3"] || len(rec.shards) != 3 {
		t.Errorf("the deliveries named shards %v, want 0, 1 and 2", rec.shards)
	}
	waitFairIdle(t, h, tc.Type)
}

// A sharded type's ends that do not know their shard (a cancel of a waiting job, an operator's
// skip) find it: the cancelled job never runs and the skipped sequence goes on.
func TestFairShardsCancelAndSkip(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	tc := TaskConfig{Type: "seq-sharded-block", MaxAttempts: 1, Fair: &Fair{Sequence: true, BlockOnFailure: true, Capacity: 4, Shards: 2}}
	var ranCancelled bool
	var mu sync.Mutex
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(tc, func(ctx context.Context, j *Job) error {
			switch string(j.Payload) {
			case "bad":
				return Permanent(errors.New("cannot"))
			case "hold":
				<-release
			case "cancelled":
				mu.Lock()
				ranCancelled = true
				mu.Unlock()
			}
			return nil
		})
	})
	keys := keysOverShards(h.stack, tc, 2)
	if h.stack.fairShardOf(tc, keys[0]) == h.stack.fairShardOf(tc, keys[1]) {
		keys = keys[1:] // two keys in two shards
	}
	bad := h.enqueue(Spec{Type: tc.Type, Tenant: keys[0], Payload: []byte("bad")})
	next := h.enqueue(Spec{Type: tc.Type, Tenant: keys[0], Payload: []byte("next")})
	hold := h.enqueue(Spec{Type: tc.Type, Tenant: keys[1], Payload: []byte("hold")})
	h.waitStatus(hold, "processing", 5*time.Second)
	waiting := h.enqueue(Spec{Type: tc.Type, Tenant: keys[1], Payload: []byte("cancelled")})
	if _, err := h.stack.Cancel(bg, waiting, CancelRequest{By: "test", Why: "not needed"}); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(bad, "failed", 5*time.Second)
	if v, _ := h.stack.Get(bg, next); v.Raw["status"] != "waiting" {
		t.Fatalf("the blocked key's next job is %s, want waiting", v.Raw["status"])
	}
	if err := h.stack.SkipBlocked(bg, bad); err != nil {
		t.Fatal(err)
	}
	close(release)
	h.waitStatus(next, "done", 5*time.Second)
	h.waitStatus(hold, "done", 5*time.Second)
	waitFairIdle(t, h, tc.Type)
	mu.Lock()
	defer mu.Unlock()
	if ranCancelled {
		t.Fatal("the cancelled waiting job ran")
	}
}

// Jobs that wait in the layout of an old shard count run once the type is served with a new one:
// the sweep visits the old layout, admits its jobs in their order, frees their ends, and forgets
// the layout once it is empty.
func TestFairShardsChangedWhileJobsWait(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	old := New(db.Client, Config{})
	defer old.Close()
	oldTC := TaskConfig{Type: "seq-relayout", Fair: &Fair{Sequence: true, Capacity: 3}}
	old.Register(oldTC, func(context.Context, *Job) error { return nil })
	client := asynq.NewClientFromRedisClient(db.Client)
	defer client.Close()
	var ids []string
	for step := range 4 {
		for _, k := range []string{"a", "b"} {
			j, err := old.Enqueue(bg, client, Spec{Type: oldTC.Type, Tenant: k, Payload: fmt.Appendf(nil, "%s:%d", k, step)})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, j.JobID)
		}
	}
	rec := newShardRecorder()
	tc := TaskConfig{Type: oldTC.Type, Fair: &Fair{Sequence: true, Capacity: 3, Shards: 3}}
	// What waits in the old layout is counted by a process of the new one (the API, /metrics).
	viewer := New(db.Client, Config{})
	defer viewer.Close()
	viewer.Register(tc, func(context.Context, *Job) error { return nil })
	if c, err := viewer.FairCounts(bg, tc.Type, 10); err != nil || c.Admitted+sumBacklog(c) != int64(len(ids)) || len(c.TopKeys) != 2 {
		t.Fatalf("counts of the new layout's process: %+v %v, want the old layout's %d jobs and keys a and b", c, err, len(ids))
	}
	// And so is one key's, a tenant's own view.
	if k, err := viewer.FairKeyCounts(bg, tc.Type, "a"); err != nil || k.Backlog+k.Running != int64(len(ids)/2) {
		t.Fatalf("key a's counts in the new layout's process: %+v %v, want its %d jobs of the old layout", k, err, len(ids)/2)
	}
	h := newHarnessOn(t, db, db.Client, Config{}, func(s *Stack) { s.Register(tc, rec.handle) })
	eventually(t, 30*time.Second, "the old layout's jobs done", func() bool {
		if _, err := h.stack.SweepFair(bg); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if v, err := h.stack.Get(bg, id); err != nil || v.Record.Status != "done" {
				return false
			}
		}
		return true
	})
	rec.check(t, []string{"a", "b"}, 4, 3)
	eventually(t, 5*time.Second, "the old layout forgotten", func() bool {
		if _, err := h.stack.SweepFair(bg); err != nil {
			t.Fatal(err)
		}
		layouts, err := h.stack.store.FairUseLayout(bg, tc.Type, 3)
		return err == nil && slices.Equal(layouts, []int{3})
	})
}

func sumBacklog(c jobstore.FairTop) int64 {
	var n int64
	for _, k := range c.TopKeys {
		n += k.Backlog
	}
	return n
}

// On a Redis Cluster, a type's shards live on different masters, and its jobs run as on one Redis.
func TestFairShardsSpreadOverTheMasters(t *testing.T) {
	t.Parallel()
	db := redistest.NewCluster(t)
	queue := db.Prefix + "-fq"
	tc := TaskConfig{Type: db.Prefix + "-fair", Queue: queue, Fair: &Fair{Sequence: true, Capacity: 6, Shards: 3}}
	s := New(db.Client, Config{Prefix: db.Prefix, Concurrency: 6})
	rec := newShardRecorder()
	s.Register(tc, rec.handle)
	srv := asynq.NewServerFromRedisClient(db.Client, s.ServerConfig(asynq.Config{Concurrency: 6, Queues: map[string]int{queue: 1},
		ShutdownTimeout: 2 * time.Second, Logger: testsupport.QuietAsynq{}, LogLevel: asynq.FatalLevel, TaskCheckInterval: 50 * time.Millisecond}))
	if err := srv.Start(s.Mux()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		s.BeginShutdown()
		srv.Shutdown()
		s.Close()
	}()
	ctx := context.Background()
	masters := map[string]bool{}
	for _, sh := range jobstore.FairShards(tc.Type, 3) {
		m, err := db.Client.MasterForKey(ctx, s.store.FairKeys(sh).Ready)
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true
	}
	if len(masters) != 3 {
		t.Fatalf("the 3 shards are on %d masters, want 3", len(masters))
	}
	client := asynq.NewClientFromRedisClient(db.Client)
	defer client.Close()
	keys := keysOverShards(s, tc, 9)
	var last []string
	for step := range 3 {
		for _, k := range keys {
			id, err := s.Enqueue(ctx, client, Spec{Type: tc.Type, Tenant: k, Payload: fmt.Appendf(nil, "%s:%d", k, step)})
			if err != nil {
				t.Fatal(err)
			}
			last = append(last, id.JobID)
		}
	}
	eventually(t, 30*time.Second, "every job done", func() bool {
		for _, id := range last {
			if v, err := s.Get(ctx, id); err != nil || v.Record.Status != "done" {
				return false
			}
		}
		return true
	})
	rec.check(t, keys, 3, 6)
	eventually(t, 5*time.Second, "the admission layer empty", func() bool {
		c, err := s.FairCounts(ctx, tc.Type, 10)
		return err == nil && c.Admitted == 0 && c.WaitingKeys == 0 && c.RunningKeys == 0
	})
}

// A job that blocks its sequence in the layout before a shard-count change is still the
// operator's to skip or replay: both find it in the layout that holds it, and its key's next jobs
// there run after it.
func TestFairBlockedJobOfAnOldLayout(t *testing.T) {
	t.Parallel()
	for _, action := range []string{"skip", "replay"} {
		t.Run(action, func(t *testing.T) {
			t.Parallel()
			db := redistest.NewDB(t)
			var fail atomic.Bool
			fail.Store(true)
			handle := func(ctx context.Context, j *Job) error {
				if string(j.Payload) == "bad" && fail.Load() {
					return Permanent(errors.New("cannot"))
				}
				return nil
			}
			typ := "seq-block-relayout-" + action
			old := newHarnessOn(t, db, db.Client, Config{}, func(s *Stack) {
				s.Register(TaskConfig{Type: typ, MaxAttempts: 1, Fair: &Fair{Sequence: true, BlockOnFailure: true, Capacity: 4}}, handle)
			})
			bad := old.enqueue(Spec{Type: typ, Tenant: "k", Payload: []byte("bad")})
			next := old.enqueue(Spec{Type: typ, Tenant: "k", Payload: []byte("next")})
			old.waitStatus(bad, "failed", 5*time.Second)
			old.stop()
			h := newHarnessOn(t, db, db.Client, Config{}, func(s *Stack) {
				s.Register(TaskConfig{Type: typ, MaxAttempts: 1, Fair: &Fair{Sequence: true, BlockOnFailure: true, Capacity: 4, Shards: 2}}, handle)
			})
			if _, err := h.stack.SweepFair(bg); err != nil { // the sweep leaves it blocked
				t.Fatal(err)
			}
			if v, _ := h.stack.Get(bg, next); v.Raw["status"] != "waiting" {
				t.Fatalf("the blocked key's next job is %s, want waiting", v.Raw["status"])
			}
			fail.Store(false)
			switch action {
			case "skip":
				if err := h.stack.SkipBlocked(bg, bad); err != nil {
					t.Fatal(err)
				}
			case "replay":
				if _, err := h.stack.Replay(bg, h.client, bad); err != nil {
					t.Fatal(err)
				}
				h.waitStatus(bad, "done", 10*time.Second)
			}
			h.waitStatus(next, "done", 10*time.Second)
			eventually(t, 10*time.Second, "the old layout forgotten", func() bool {
				if _, err := h.stack.SweepFair(bg); err != nil {
					t.Fatal(err)
				}
				layouts, err := h.stack.store.FairUseLayout(bg, typ, 2)
				return err == nil && slices.Equal(layouts, []int{2})
			})
		})
	}
}

// An old layout is forgotten only once nothing is left in it: withdrawn entries still in a key's
// list (cancelled jobs the admission had not passed over yet, at most 1,024 a call) count, and one
// sweep passes over all of them. The layout was retired once its counts read 0 (a withdrawal
// lowers them at once), and what its lists still held was never read again, with no expiry.
func TestAnOldLayoutIsForgottenOnlyOnceEmpty(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	old := New(db.Client, Config{})
	defer old.Close()
	oldTC := TaskConfig{Type: "retire-withdrawn", Fair: &Fair{Capacity: 1}}
	old.Register(oldTC, func(context.Context, *Job) error { return nil })
	specs := make([]Spec, 3*1024+60)
	for i := range specs {
		specs[i] = Spec{Type: oldTC.Type, Tenant: "a"}
	}
	items := old.EnqueueMany(bg, specs, false)
	// No server runs: the first job is admitted (capacity 1), the rest wait; all are cancelled,
	// the last first, so that the admission after the first's end passes over 1,024 of them only.
	for i := len(items) - 1; i >= 0; i-- {
		if items[i].Err != nil {
			t.Fatal(items[i].Err)
		}
		if _, err := old.Cancel(bg, items[i].JobID, CancelRequest{By: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	old.fairEnds.wg.Wait()
	k := old.store.FairKeys(jobstore.FairShards(oldTC.Type, 1)[0])
	if n := db.Client.LLen(bg, k.WaitPrefix+"a").Val(); n == 0 {
		t.Fatal("the test needs withdrawn entries left in the old layout's list")
	}
	tc := TaskConfig{Type: oldTC.Type, Fair: &Fair{Capacity: 3, Shards: 3}}
	s := New(db.Client, Config{})
	defer s.Close()
	s.Register(tc, func(context.Context, *Job) error { return nil })
	if _, err := s.SweepFair(bg); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SweepFair(bg); err != nil {
		t.Fatal(err)
	}
	layouts, err := s.store.FairLayouts(bg, tc.Type)
	if err != nil {
		t.Fatal(err)
	}
	left := db.Client.Exists(bg, k.WaitPrefix+"a", k.Once, k.Withdrawn, k.Ready, k.Backlog, k.Admitted, k.Running).Val()
	if slices.Contains(layouts, 1) || left != 0 {
		t.Fatalf("after two sweeps: layouts %v, %d of the old layout's keys left, want layout 1 forgotten and nothing left", layouts, left)
	}
}
