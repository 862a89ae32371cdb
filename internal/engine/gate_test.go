package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

var errRefused = errors.New("test: the gate refuses")

// refusing is an Alongside that sends one command with the create and whose gate refuses once it
// saw that command's answer.
func refusing(t *testing.T) func(context.Context, redis.Pipeliner) func() error {
	return func(ctx context.Context, pipe redis.Pipeliner) func() error {
		echo := pipe.Echo(ctx, "alongside")
		return func() error {
			if echo.Val() != "alongside" {
				t.Errorf("the gate ran before its command's answer: %v", echo.Err())
			}
			return errRefused
		}
	}
}

// A gate that refuses gets its error back as it is, and the job the create made speculatively is
// gone with its timeline, marker and pending flag; no delivery was enqueued.
func TestARefusingGateAbandonsTheSpeculativeJob(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "x"}, func(ctx context.Context, j *Job) error { return nil })
	})
	spec := Spec{Type: "x", Resource: "r", Dedup: &Dedup{Policy: UntilStarted, Key: "k"}, Alongside: refusing(t)}
	if _, err := h.stack.Enqueue(bg, h.client, spec); err != errRefused {
		t.Fatalf("a refusing gate: %v, want its own error", err)
	}
	if keys := h.rdb.Keys(bg, "jobguard:*").Val(); len(keys) != 0 {
		t.Fatalf("left behind: %v", keys)
	}
	if tasks, _ := h.insp.ListPendingTasks("default"); len(tasks) != 0 {
		t.Fatalf("deliveries of a refused job: %v", tasks)
	}
	spec.Alongside = nil
	if e, err := h.stack.Enqueue(bg, h.client, spec); err != nil || e.Deduplicated {
		t.Fatalf("the next request: %+v %v", e, err)
	}
}

// A refusing gate leaves the jobs the create found alone: no duplicate's event or answer, no
// replaced payload, no wait for a pending job.
func TestARefusingGateLeavesTheJobsItFoundAlone(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "x"}, func(ctx context.Context, j *Job) error { return nil })
	})
	// The resources are busy: the jobs found wait.
	for _, r := range []string{"dup", "replace"} {
		holder, _ := h.stack.locks.TryAcquire(bg, ResourceTag(r), time.Minute)
		defer func() { _ = holder.Release(bg) }()
	}
	var finally atomic.Int32
	count := func(context.Context, redis.Pipeliner, Enqueued) { finally.Add(1) }
	for _, policy := range []Policy{UntilDone, Replace} {
		resource := map[Policy]string{UntilDone: "dup", Replace: "replace"}[policy]
		spec := Spec{Type: "x", Resource: resource, Payload: []byte("v1"), Dedup: &Dedup{Policy: policy, Key: "k"}}
		first := h.enqueue(spec)
		spec.Payload, spec.Alongside, spec.Finally = []byte("v2"), refusing(t), count
		if _, err := h.stack.Enqueue(bg, h.client, spec); err != errRefused {
			t.Fatalf("%s: %v, want the gate's error", policy, err)
		}
		v := h.waitStatus(first, "queued", time.Second)
		if has(v, "deduplicated") || has(v, "replaced") || string(v.Record.Payload) != "v1" {
			t.Fatalf("%s: the job found was acted on: %v, payload %q", policy, events(v), v.Record.Payload)
		}
	}
	if finally.Load() != 0 || h.stack.Stats.Deduplicated.Load() != 0 || h.stack.Stats.Replaced.Load() != 0 {
		t.Fatalf("Finally ran %d times, %d deduplicated, %d replaced", finally.Load(), h.stack.Stats.Deduplicated.Load(), h.stack.Stats.Replaced.Load())
	}
	// A marker whose job is still pending (its enqueuer died): without the gate this request
	// would wait for it; refused, it returns at once.
	spec := Spec{Type: "x", Resource: "pending", Dedup: &Dedup{Policy: UntilDone, Key: "k"}, Alongside: refusing(t)}
	keys := must(h.stack.keysFor(NewJobID("pending", time.Now()), "", "until_done:k"))
	dead := NewJobID("pending", time.Now())
	h.rdb.Set(bg, keys.Marker, dead, time.Minute)
	h.rdb.Set(bg, keys.Pending, dead, time.Minute)
	start := time.Now()
	if _, err := h.stack.Enqueue(bg, h.client, spec); err != errRefused {
		t.Fatalf("pending: %v, want the gate's error", err)
	}
	if took := time.Since(start); took > pendingWait/2 {
		t.Fatalf("a refused request waited %s for a pending job", took)
	}
}

// The speculation's safety: a duplicate told "pending" about a speculative job waits for its
// confirmation, finds it abandoned when the gate refuses, and creates its own job. Its own
// Alongside is sent once and its gate read once, though it creates twice.
func TestADuplicateOfASpeculativeJobCreatesItsOwn(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "x"}, func(ctx context.Context, j *Job) error { return nil })
	})
	// The duplicate comes from another process, whose clock stands still: its pendingWait never
	// runs out here.
	clock := newFakeClock()
	dup := New(h.rdb, Config{Clock: clock})
	dup.Register(TaskConfig{Type: "x"}, func(ctx context.Context, j *Job) error { return nil })
	defer dup.Close()

	release := make(chan struct{})
	spec := Spec{Type: "x", Resource: "r", Dedup: &Dedup{Policy: UntilStarted, Key: "k"}}
	speculative := spec
	speculative.Alongside = func(ctx context.Context, pipe redis.Pipeliner) func() error {
		return func() error { <-release; return errRefused }
	}
	first := make(chan error, 1)
	go func() {
		_, err := h.stack.Enqueue(bg, h.client, speculative)
		first <- err
	}()
	keys := must(h.stack.keysFor(NewJobID("r", time.Now()), "", "until_started:k"))
	var abandoned string
	eventually(t, 5*time.Second, "the speculative job's marker is written", func() bool {
		abandoned = h.rdb.Get(bg, keys.Marker).Val()
		return abandoned != ""
	})

	var sent, gated atomic.Int32
	second := spec
	second.Alongside = func(ctx context.Context, pipe redis.Pipeliner) func() error {
		sent.Add(1)
		return func() error { gated.Add(1); return nil }
	}
	reads := clock.Reads()
	done := make(chan Enqueued, 1)
	go func() {
		e, err := dup.Enqueue(bg, h.client, second)
		if err != nil {
			t.Error(err)
		}
		done <- e
	}()
	// Enqueue reads the clock once, awaitConfirmation once to set its deadline and once per poll.
	eventually(t, 5*time.Second, "the duplicate polls the speculative job's confirmation", func() bool { return clock.Reads() >= reads+3 })
	close(release)
	if err := <-first; err != errRefused {
		t.Fatalf("the speculative request: %v", err)
	}
	e := <-done
	if e.Deduplicated || e.JobID == "" || e.JobID == abandoned {
		t.Fatalf("the duplicate was answered %+v; the abandoned job was %s", e, abandoned)
	}
	if sent.Load() != 1 || gated.Load() != 1 {
		t.Fatalf("Alongside sent %d times, its gate read %d times; want once each", sent.Load(), gated.Load())
	}
	h.waitStatus(e.JobID, "done", 10*time.Second)
	if _, err := h.stack.Get(bg, abandoned); !errors.Is(err, ErrJobNotFound) {
		t.Fatalf("the abandoned job: %v", err)
	}
}
