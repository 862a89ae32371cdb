package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// A write that reaches Redis after its caller's deadline does nothing: an enqueue answered "not
// accepted" leaves no record, timeline or marker, and a replay whose record update came too late
// leaves the job failed while its delivery is acknowledged without running.
func TestWritesPastTheDeadlineWriteNothing(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "x", MaxAttempts: 1}, func(ctx context.Context, j *Job) error {
			runs.Add(1)
			return Permanent(errors.New("no"))
		})
	})
	// A deadline shorter than the margin: every script finds it passed.
	late := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(bg, jobstore.DeadlineMargin/5)
	}
	ctx, cancel := late()
	_, err := h.stack.Enqueue(ctx, h.client, Spec{Type: "x", Resource: "r", Dedup: &Dedup{Policy: UntilDone, Key: "k"}})
	cancel()
	if !errors.Is(err, ErrNotAccepted) {
		t.Fatalf("enqueue past its deadline: %v", err)
	}
	if keys := h.rdb.Keys(bg, "jobguard:*").Val(); len(keys) != 0 {
		t.Fatalf("a refused enqueue left %v", keys)
	}

	id := h.enqueue(Spec{Type: "x", Resource: "r"})
	h.waitStatus(id, "failed", 10*time.Second)
	ctx, cancel = late()
	_, err = h.stack.Replay(ctx, h.client, id)
	cancel()
	if !errors.Is(err, ErrNotAccepted) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("replay past its deadline: %v", err)
	}
	// Whatever delivery it enqueued starts after replayDelay, finds the job failed and is
	// acknowledged, so asynq forgets it.
	eventually(t, replayDelay+10*time.Second, "the replay's delivery is gone", func() bool {
		_, err := h.insp.GetTaskInfo("default", DeliveryID(id, 2))
		return errors.Is(err, asynq.ErrTaskNotFound)
	})
	v, err := h.stack.Get(bg, id)
	if err != nil || v.Raw["status"] != "failed" || v.Raw["delivery"] != DeliveryID(id, 1) || runs.Load() != 1 {
		t.Fatalf("after a replay that came too late: %v %v, %d runs", v.Record, err, runs.Load())
	}
}

// A record waiting for its confirmation lives only until its writer's deadline plus jobstore.ClaimSlack.
func TestAnUnconfirmedRecordRunsOut(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "x"}, func(ctx context.Context, j *Job) error { return nil })
	})
	ctx, cancel := context.WithTimeout(bg, time.Second)
	defer cancel()
	id := NewJobID("r", time.Now())
	keys := must(h.stack.keysFor(id, "", ""))
	j := h.stack.newRecord(ctx, id, must(taskConfigOf(h.stack, "x")), Spec{Type: "x", Resource: "r"}, "", time.Now())
	state, _, err := h.stack.create(ctx, keys, j)
	if err != nil || state != jobstore.Created {
		t.Fatalf("create: %v %v", state, err)
	}
	ttl := h.rdb.PTTL(bg, keys.Record).Val()
	if ttl <= 0 || ttl > time.Second+jobstore.ClaimSlack {
		t.Fatalf("an unconfirmed record lives %s", ttl)
	}
}

func taskConfigOf(s *Stack, typ string) (TaskConfig, error) {
	tc, ok := s.TaskConfig(typ)
	if !ok {
		return tc, errors.New("not registered")
	}
	return tc, nil
}
