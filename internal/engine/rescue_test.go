package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// stranded starts a job whose handler never returns and then makes its run look dead: the lease
// is gone and the heartbeat is older than the lease TTL (what a kill -9 leaves behind).
func stranded(t *testing.T) (*harness, string, chan struct{}, *atomic.Int32) {
	return strandedLimited(t, Limit{}, nil)
}

// strandedLimited is stranded for a type of limit lim (tenant "a"); tokens, when not nil, gets the
// limit token each run held.
func strandedLimited(t *testing.T, lim Limit, tokens chan<- int64) (*harness, string, chan struct{}, *atomic.Int32) {
	hang, began := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	h := newHarness(t, Config{LeaseTTL: 2 * time.Second}, func(s *Stack) {
		s.Register(TaskConfig{Type: "work", MaxAttempts: 3, Limit: lim}, func(ctx context.Context, j *Job) error {
			if tokens != nil {
				tokens <- j.LimitToken()
			}
			if runs.Add(1) == 1 {
				close(began)
				<-hang // ignores its context, like a process that is gone
				return s.Locks().SetFields(context.Background(), j.Fence(), j.Key("state"), 0, "by", "first")
			}
			return s.Locks().SetFields(ctx, j.Fence(), j.Key("state"), 0, "by", "rescued")
		})
	})
	id := h.enqueue(Spec{Type: "work", Tenant: "a", Resource: "r"})
	h.waitStatus(id, "processing", 10*time.Second)
	// The handler runs once its take has run too: a take sent again after a NOSCRIPT (the start's
	// script loaded, the take's not yet) runs after the start, and would outlive the Del below.
	select {
	case <-began:
	case <-time.After(10 * time.Second):
		t.Fatal("the first run's handler did not start")
	}
	h.stack.keeper.Close() // no more renewals from the "dead" worker
	tag := ResourceTag("r")
	h.rdb.Del(bg, h.stack.locks.LeaseKey(tag))
	if lim.on() {
		h.rdb.Del(bg, h.stack.store.LimitKeys("work", "a").Holders) // its slot lapsed with it
	}
	h.rdb.HSet(bg, h.stack.locks.Key(tag, "job:"+id), "heartbeat_at", time.Now().Add(-3*time.Second).UnixMilli())
	return h, id, hang, &runs
}

func TestRescueRedeliversTheJobOfALostWorker(t *testing.T) {
	t.Parallel()
	h, id, hang, runs := stranded(t)
	defer close(hang)
	// A second stack (another worker process) runs the rescue and the new delivery.
	other := New(h.rdb, Config{LeaseTTL: 2 * time.Second, WorkerID: "rescuer"})
	other.Register(TaskConfig{Type: "work", MaxAttempts: 3}, func(ctx context.Context, j *Job) error {
		runs.Add(1)
		return other.Locks().SetFields(ctx, j.Fence(), j.Key("state"), 0, "by", "rescued")
	})
	defer other.Close()
	n, err := other.NewRescuer(h.insp, h.client, 0).Pass(bg)
	if err != nil || n != 1 {
		t.Fatalf("rescue pass: %d %v", n, err)
	}
	// The harness's server may take the new delivery at once: retrying, or already past it.
	v, _ := h.stack.Get(bg, id)
	if st := v.Raw["status"]; (st != "retrying" && st != "processing" && st != "done") || v.Raw["delivery"] != DeliveryID(id, 2) || !has(v, "rescued") {
		t.Fatalf("after rescue: %v %v", v.Record, events(v))
	}
	// The new delivery runs on the harness's server (a free slot; its 2 s lease is enough).
	v = h.waitStatus(id, "done", 15*time.Second)
	if v.Raw["attempt"] != "2" || v.Raw["deliveries"] != "2" {
		t.Fatalf("after the new delivery: %v", v.Record)
	}
	// A second pass finds nothing: the old delivery is no longer the job's.
	if n, _ := other.NewRescuer(h.insp, h.client, 0).Pass(bg); n != 0 {
		t.Fatalf("second pass rescued %d", n)
	}
}

func TestTwoRescuersDeliverOnce(t *testing.T) {
	t.Parallel()
	h, id, hang, _ := stranded(t)
	defer close(hang)
	var total atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s := New(h.rdb, Config{LeaseTTL: 2 * time.Second, WorkerID: "rescuer-" + string(rune('a'+i))})
			s.Register(TaskConfig{Type: "work", MaxAttempts: 3}, func(context.Context, *Job) error { return nil })
			defer s.Close()
			n, _ := s.NewRescuer(h.insp, h.client, 0).Pass(bg)
			total.Add(int32(n))
		}(i)
	}
	wg.Wait()
	v, _ := h.stack.Get(bg, id)
	if total.Load() != 1 || v.Raw["deliveries"] != "2" {
		t.Fatalf("%d rescues, deliveries %s", total.Load(), v.Raw["deliveries"])
	}
}

func TestRescueOnTheLastAttemptFails(t *testing.T) {
	t.Parallel()
	h, id, hang, _ := stranded(t)
	defer close(hang)
	tag := ResourceTag("r")
	h.rdb.HSet(bg, h.stack.locks.Key(tag, "job:"+id), "max_attempts", 1)
	s := New(h.rdb, Config{LeaseTTL: 2 * time.Second})
	s.Register(TaskConfig{Type: "work"}, func(context.Context, *Job) error { return nil })
	defer s.Close()
	if n, _ := s.NewRescuer(h.insp, h.client, 0).Pass(bg); n != 1 {
		t.Fatalf("rescued %d", n)
	}
	v, _ := h.stack.Get(bg, id)
	if v.Raw["status"] != "failed" || !has(v, "rescued") {
		t.Fatalf("%v %v", v.Record, events(v))
	}
}

// A live job (lease held by its run, fresh heartbeat) is never rescued.
func TestLiveJobsAreLeftAlone(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	h := newHarness(t, Config{LeaseTTL: 2 * time.Second}, func(s *Stack) {
		s.Register(TaskConfig{Type: "work"}, func(ctx context.Context, j *Job) error { <-release; return nil })
	})
	id := h.enqueue(Spec{Type: "work", Resource: "r"})
	h.waitStatus(id, "processing", 10*time.Second)
	r := h.stack.NewRescuer(h.insp, h.client, 0)
	for i := 0; i < 3; i++ {
		if n, err := r.Pass(bg); n != 0 || err != nil {
			t.Fatalf("pass %d rescued %d (%v)", i, n, err)
		}
		// The next pass comes after a renewal.
		v, _ := h.stack.Get(bg, id)
		beat := v.Raw["heartbeat_at"]
		eventually(t, 5*time.Second, "a renewal", func() bool {
			v, _ := h.stack.Get(bg, id)
			return v.Raw["heartbeat_at"] != beat
		})
	}
	close(release)
	if v := h.waitStatus(id, "done", 10*time.Second); v.Raw["deliveries"] != "1" {
		t.Fatalf("%v", v.Record)
	}
}

// A lost run's rescue whose next delivery asynq already holds (an unstarted delivery's rescue that
// the record never adopted, still sent back as untaken) takes that delivery: it used to count the
// conflict as a failed enqueue and put the job back, on every pass until the held one was dropped.
func TestRescueTakesANextDeliveryAsynqAlreadyHolds(t *testing.T) {
	t.Parallel()
	h, id, hang, runs := stranded(t)
	defer close(hang)
	tc, _ := h.stack.TaskConfig("work")
	if err := h.stack.deliver(bg, h.client, tc, id, DeliveryID(id, 2), "", "", nil, time.Second); err != nil {
		t.Fatal(err)
	}
	other := New(h.rdb, Config{LeaseTTL: 2 * time.Second, WorkerID: "rescuer"})
	other.Register(TaskConfig{Type: "work", MaxAttempts: 3}, func(context.Context, *Job) error { return nil })
	defer other.Close()
	if n, err := other.NewRescuer(h.insp, h.client, 0).Pass(bg); err != nil || n != 1 {
		t.Fatalf("rescue pass: %d rescued, %v; want 1", n, err)
	}
	v := h.waitStatus(id, "done", 15*time.Second)
	if v.Raw["attempt"] != "2" || v.Raw["deliveries"] != "2" || runs.Load() != 2 {
		t.Fatalf("after the held delivery ran: runs %d, %v", runs.Load(), v.Record)
	}
}
