package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// takenByADeadWorker does to delivery id of queue what asynq's dequeue does (pending to active,
// leased for 30 s) on behalf of a worker that then dies before the start script: no server lists it.
func takenByADeadWorker(t *testing.T, rdb *redis.Client, queue, id string) {
	t.Helper()
	q := "asynq:{" + queue + "}:"
	if n := rdb.LRem(bg, q+"pending", 0, id).Val(); n != 1 {
		t.Fatalf("delivery %s is not pending in %s", id, queue)
	}
	rdb.LPush(bg, q+"active", id)
	rdb.HSet(bg, q+"t:"+id, "state", "active")
	rdb.HDel(bg, q+"t:"+id, "pending_since")
	rdb.ZAdd(bg, q+"lease", redis.Z{Score: float64(time.Now().Add(30 * time.Second).Unix()), Member: id})
}

// admittedSequenceJob is a stack on db with type "seq" (a fair sequence, no server) and the id of
// one job of key "a", admitted and its first delivery pending in asynq; the stack is closed when the
// test ends.
func admittedSequenceJob(t *testing.T, db redistest.DB, cfg Config) (*Stack, *asynq.Client, *asynq.Inspector, string) {
	t.Helper()
	s := New(db.Client, cfg)
	s.Register(TaskConfig{Type: "seq", MaxAttempts: 3, Fair: &Fair{Sequence: true, Capacity: 4}}, func(context.Context, *Job) error { return nil })
	t.Cleanup(s.Close)
	client, insp := asynq.NewClientFromRedisClient(db.Client), asynq.NewInspectorFromRedisClient(db.Client)
	created, err := s.Enqueue(bg, client, Spec{Type: "seq", Tenant: "a"})
	if err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 5*time.Second, "the admitted job delivered", func() bool {
		info, err := insp.GetTaskInfo("default", DeliveryID(created.JobID, 1))
		return err == nil && info.State == asynq.TaskStatePending
	})
	return s, client, insp, created.JobID
}

// A worker killed between asynq's dequeue and the start script left its job queued, and only
// asynq's recoverer (60-120 s) brought the delivery back (make chaos-workflows: a fan-in waited
// 61 s on one such leaf). The rescuer gives it a new delivery once it has seen it unstarted, and
// listed by no live server, for UnstartedGrace; the job's attempt is not spent. Before the fix no
// pass ever rescued it.
func TestRescueRedeliversADeliveryTakenByAWorkerThatDiedBeforeItsStart(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	clock := newFakeClock()
	s := New(db.Client, Config{LeaseTTL: 2 * time.Second, Clock: clock, WorkerID: "rescuer"})
	s.Register(TaskConfig{Type: "work", MaxAttempts: 3}, func(context.Context, *Job) error { return nil })
	defer s.Close()
	client, insp := asynq.NewClientFromRedisClient(db.Client), asynq.NewInspectorFromRedisClient(db.Client)
	created, err := s.Enqueue(bg, client, Spec{Type: "work", Tenant: "a", Resource: "r"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.JobID
	takenByADeadWorker(t, db.Client, "default", DeliveryID(id, 1))

	r := s.NewRescuer(insp, client, 0)
	if n, err := r.Pass(bg); err != nil || n != 0 {
		t.Fatalf("first pass: %d rescued, %v; want 0 (just seen)", n, err)
	}
	clock.Advance(UnstartedGrace - time.Second)
	if n, _ := r.Pass(bg); n != 0 {
		t.Fatalf("a pass within the grace rescued %d", n)
	}
	clock.Advance(2 * time.Second)
	if n, err := r.Pass(bg); err != nil || n != 1 {
		t.Fatalf("pass after the grace: %d rescued, %v; want 1", n, err)
	}
	v, _ := s.Get(bg, id)
	if v.Raw["status"] != "queued" || v.Raw["delivery"] != DeliveryID(id, 2) || v.Raw["attempt"] != "0" || !has(v, "rescued") {
		t.Fatalf("after the rescue: %v %v", v.Record, events(v))
	}
	if info, err := insp.GetTaskInfo("default", DeliveryID(id, 2)); err != nil || info.State != asynq.TaskStatePending {
		t.Fatalf("new delivery in asynq: %+v %v", info, err)
	}
	// The next pass finds the old delivery no longer the job's.
	clock.Advance(UnstartedGrace)
	if n, _ := r.Pass(bg); n != 0 {
		t.Fatalf("a later pass rescued %d more", n)
	}
}

// A delivery a live server is working on (here a handler that has not reached the start script)
// is listed by it and left alone, however long it has been active.
func TestRescueLeavesAnUnstartedDeliveryOfALiveServerAlone(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	clock := newFakeClock()
	s := New(db.Client, Config{LeaseTTL: 2 * time.Second, Clock: clock, WorkerID: "rescuer"})
	s.Register(TaskConfig{Type: "work", MaxAttempts: 3}, func(context.Context, *Job) error { return nil })
	defer s.Close()
	client, insp := asynq.NewClientFromRedisClient(db.Client), asynq.NewInspectorFromRedisClient(db.Client)
	created, err := s.Enqueue(bg, client, Spec{Type: "work", Tenant: "a", Resource: "r"})
	if err != nil {
		t.Fatal(err)
	}
	d1 := DeliveryID(created.JobID, 1)
	hold := make(chan struct{})
	srv := asynq.NewServerFromRedisClient(db.Client, asynq.Config{Concurrency: 1, Queues: map[string]int{"default": 1},
		Logger: testsupport.QuietAsynq{}, LogLevel: asynq.FatalLevel, TaskCheckInterval: 50 * time.Millisecond, ShutdownTimeout: time.Second})
	if err := srv.Start(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		select { // a worker slow to reach the start script
		case <-hold:
		case <-ctx.Done():
		}
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	defer close(hold)
	// asynq lists a server's workers at its next heartbeat (every 5 s).
	testsupport.Eventually(t, 15*time.Second, "the server lists the delivery", func() bool {
		listed, _ := listedByLiveServers(insp)
		return listed[d1]
	})
	r := s.NewRescuer(insp, client, 0)
	for range 3 {
		if n, err := r.Pass(bg); err != nil || n != 0 {
			t.Fatalf("a pass rescued %d, %v: the delivery's server is alive", n, err)
		}
		clock.Advance(UnstartedGrace)
	}
	if v, _ := s.Get(bg, created.JobID); v.Raw["delivery"] != d1 || has(v, "rescued") {
		t.Fatalf("the job was rescued: %v %v", v.Record, events(v))
	}
}

// The next delivery is enqueued before the record names it: a rescue whose enqueue fails leaves
// the job as it was, and the next pass rescues it. Before, the record named a delivery asynq did
// not have, and only the reconciler (30 s grace) repaired it; a chaos run saw one wait 125 s.
func TestRescueOfAnUnstartedDeliveryWhoseEnqueueFailsChangesNothing(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	clock := newFakeClock()
	s := New(db.Client, Config{LeaseTTL: 2 * time.Second, Clock: clock, WorkerID: "rescuer"})
	s.Register(TaskConfig{Type: "work", MaxAttempts: 3}, func(context.Context, *Job) error { return nil })
	defer s.Close()
	client, insp := asynq.NewClientFromRedisClient(db.Client), asynq.NewInspectorFromRedisClient(db.Client)
	created, err := s.Enqueue(bg, client, Spec{Type: "work", Tenant: "a", Resource: "r"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.JobID
	takenByADeadWorker(t, db.Client, "default", DeliveryID(id, 1))
	unreachable := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer unreachable.Close()
	broken := s.NewRescuer(insp, asynq.NewClientFromRedisClient(unreachable), 0)
	_, _ = broken.Pass(bg)
	clock.Advance(UnstartedGrace + time.Second)
	if n, _ := broken.Pass(bg); n != 0 {
		t.Fatalf("a rescue whose enqueue failed counted %d", n)
	}
	if v, _ := s.Get(bg, id); v.Raw["delivery"] != DeliveryID(id, 1) || v.Raw["deliveries"] != "1" || has(v, "rescued") {
		t.Fatalf("the record moved without its delivery: %v %v", v.Record, events(v))
	}
	r := s.NewRescuer(insp, client, 0)
	_, _ = r.Pass(bg)
	clock.Advance(UnstartedGrace + time.Second)
	if n, err := r.Pass(bg); err != nil || n != 1 {
		t.Fatalf("the next rescuer's pass: %d rescued, %v; want 1", n, err)
	}
	if info, err := insp.GetTaskInfo("default", DeliveryID(id, 2)); err != nil || info.State != asynq.TaskStatePending {
		t.Fatalf("new delivery in asynq: %+v %v", info, err)
	}
}

// A fairly dispatched job's record stays waiting until its start, admitted or not: a worker
// killed between asynq's dequeue of its admitted delivery and the start script left it to asynq's
// recoverer, its key's next jobs held behind it (a sequence's whole key): a Redis stalled for 5 s
// under the template's drain (its dequeue's answer lost) held one key 116 s. The rescuer gives it a
// new delivery like a queued job's, which keeps the shard header its admission is freed by.
func TestRescueRedeliversAnAdmittedFairDeliveryTakenByAWorkerThatDied(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	clock := newFakeClock()
	s, client, insp, id := admittedSequenceJob(t, db, Config{LeaseTTL: 2 * time.Second, Clock: clock, WorkerID: "rescuer"})
	takenByADeadWorker(t, db.Client, "default", DeliveryID(id, 1))

	r := s.NewRescuer(insp, client, 0)
	if n, err := r.Pass(bg); err != nil || n != 0 {
		t.Fatalf("first pass: %d rescued, %v; want 0 (just seen)", n, err)
	}
	clock.Advance(UnstartedGrace + time.Second)
	if n, err := r.Pass(bg); err != nil || n != 1 {
		t.Fatalf("pass after the grace: %d rescued, %v; want 1", n, err)
	}
	v, _ := s.Get(bg, id)
	if v.Raw["status"] != "waiting" || v.Raw["delivery"] != DeliveryID(id, 2) || !has(v, "rescued") {
		t.Fatalf("after the rescue: %v %v", v.Record, events(v))
	}
	if info, err := insp.GetTaskInfo("default", DeliveryID(id, 2)); err != nil || info.State != asynq.TaskStatePending {
		t.Fatalf("new delivery in asynq: %+v %v", info, err)
	}
	// The new delivery runs the job, whose end admits its key's next.
	next, err := s.Enqueue(bg, client, Spec{Type: "seq", Tenant: "a"})
	if err != nil {
		t.Fatal(err)
	}
	srv := asynq.NewServerFromRedisClient(db.Client, s.ServerConfig(asynq.Config{Concurrency: 2, Queues: map[string]int{"default": 1},
		Logger: testsupport.QuietAsynq{}, LogLevel: asynq.FatalLevel, TaskCheckInterval: 50 * time.Millisecond, ShutdownTimeout: time.Second}))
	if err := srv.Start(s.Mux()); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	for _, j := range []string{id, next.JobID} {
		testsupport.Eventually(t, 10*time.Second, "job "+j+" done", func() bool {
			v, _ := s.Get(bg, j)
			return v.Raw["status"] == "done"
		})
	}
}

// The rescue enqueues the new delivery before the record names it. A live worker that dequeued it
// in between was told it was stale and acknowledged it, and the record then named a delivery asynq
// no longer had: a fair sequence's key stayed held for good (make chaos-fair, 58 jobs of one key
// never ran). Such a delivery is now sent back until the record takes it, then runs.
func TestARescueDeliveryTakenBeforeItsRecordRunsOnceTaken(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "x", MaxAttempts: 3}, func(context.Context, *Job) error { runs.Add(1); return nil })
	})
	// The first delivery due in an hour: the record stays queued naming it, as one a dead worker took.
	id := h.enqueue(Spec{Type: "x", Resource: "r", ProcessIn: time.Hour})
	tc, _ := h.stack.TaskConfig("x")
	keys, err := h.stack.store.Keys(id, "")
	if err != nil {
		t.Fatal(err)
	}
	// The rescue's first half: its delivery, due at once, which the harness's server dequeues.
	next, err := h.stack.store.NextUnstartedDelivery(bg, keys, id, DeliveryID(id, 1))
	if err != nil || next != DeliveryID(id, 2) {
		t.Fatalf("next delivery %q, %v", next, err)
	}
	if err := h.stack.deliver(bg, h.client, tc, id, next, "", "", nil, 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the early delivery was sent back", func() bool { return h.stack.Stats.Bounces.Load() > 0 })
	if _, err := asynq.NewInspectorFromRedisClient(h.rdb).GetTaskInfo("default", next); err != nil {
		t.Fatalf("the early delivery was dropped, not sent back: %v", err)
	}
	// Its second half, late.
	if ok, err := h.stack.store.RescueUnstarted(bg, keys, DeliveryID(id, 1), next, time.Now()); err != nil || !ok {
		t.Fatalf("rescue: %v %v", ok, err)
	}
	v := h.waitStatus(id, "done", 10*time.Second)
	if runs.Load() != 1 || v.Raw["delivery"] != next {
		t.Fatalf("runs %d, record %v", runs.Load(), v.Raw)
	}
}

// The sweep delivers an admitted job that has not started again, as the delivery its record names.
// It used to send the delivery its admission carried: after a rescue had given the job a new one
// that asynq then lost, that old delivery was stale at every start, and the job's key stayed held
// for good (make chaos-fair).
func TestFairSweepDeliversTheRecordsCurrentDelivery(t *testing.T) {
	t.Parallel()
	s, _, insp, id := admittedSequenceJob(t, redistest.NewDB(t), Config{LeaseTTL: 2 * time.Second, WorkerID: "sweeper"})
	first, second := DeliveryID(id, 1), DeliveryID(id, 2)
	// A rescue gave the job its second delivery, which asynq then lost with the first.
	keys, _ := s.store.Keys(id, "")
	if ok, err := s.store.RescueUnstarted(bg, keys, first, second, time.Now()); err != nil || !ok {
		t.Fatalf("rescue: %v %v", ok, err)
	}
	if err := insp.DeleteTask("default", first); err != nil {
		t.Fatal(err)
	}
	if n, err := s.SweepFair(bg); err != nil || n != 1 {
		t.Fatalf("sweep repaired %d (%v), want 1", n, err)
	}
	if info, err := insp.GetTaskInfo("default", second); err != nil || info.State != asynq.TaskStatePending {
		t.Fatalf("the record's delivery in asynq: %+v %v", info, err)
	}
	if _, err := insp.GetTaskInfo("default", first); err == nil {
		t.Fatalf("the stale delivery %s was sent again", first)
	}
}
