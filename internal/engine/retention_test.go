package engine

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Retention: after many finished jobs and their retention, only live data is left.
func TestRetentionLeavesOnlyLiveData(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Retention: 5 * time.Second}, func(s *Stack) {
		s.Register(TaskConfig{Type: "own"}, func(ctx context.Context, j *Job) error { return nil })
		s.Register(TaskConfig{Type: "apply"}, func(ctx context.Context, j *Job) error {
			_, err := j.Apply(ctx, addEffect, j.Key("stock"), nil, 1)
			return err
		})
	})
	var ids []string
	for i := 0; i < 30; i++ {
		ids = append(ids, h.enqueue(Spec{Type: "own"}))
	}
	for i := 0; i < 5; i++ {
		ids = append(ids, h.enqueue(Spec{Type: "apply", Resource: "live-sku", OpKey: fmt.Sprint("order-", i)}))
	}
	// Records may expire before they can be polled: count outcomes instead.
	deadline := time.Now().Add(15 * time.Second)
	for h.stack.Stats.Succeeded.Load() != int64(len(ids)) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d done; stats %+v; keys %v", h.stack.Stats.Succeeded.Load(), len(ids), &h.stack.Stats, h.rdb.Keys(bg, "jobguard:*").Val())
		}
		time.Sleep(20 * time.Millisecond)
	}
	tag := ResourceTag("live-sku")
	live := map[string]bool{h.stack.locks.FenceKey(tag): true, h.stack.locks.Key(tag, "stock"): true}
	for i := 0; i < 5; i++ {
		live[h.stack.locks.Key(tag, fmt.Sprint("applied:order-", i))] = true
	}
	eventually(t, 15*time.Second, "only live keys are left", func() bool {
		keys := h.rdb.Keys(bg, "jobguard:*").Val()
		for _, k := range keys {
			if !live[k] {
				return false
			}
		}
		return len(keys) == len(live)
	})
	for k := range live {
		if ttl := h.rdb.PTTL(bg, k).Val(); ttl != -1 {
			t.Errorf("live key %s has TTL %s", k, ttl)
		}
	}
}
