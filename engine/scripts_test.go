package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/redistest"
)

// scriptJob is a hand-made record for driving the scripts directly.
type scriptJob struct {
	s    *Stack
	id   string
	keys jobKeys
}

func newScriptJob(t *testing.T, status string, token int64) scriptJob {
	db := redistest.NewDB(t)
	s := New(db.Client, Config{})
	t.Cleanup(s.Close)
	id := NewJobID("r", time.Now())
	keys, _ := s.keysFor(id, "")
	fields := []any{"job_id", id, "status", status, "delivery", DeliveryID(id, 1), "attempt", 1, "max_attempts", 3, "resource", "r"}
	if token > 0 {
		fields = append(fields, "_fence_token", token, "_fence_owner", "owner-1")
		db.Client.Set(bg, keys.fence, token, 0)
	}
	db.Client.HSet(bg, keys.record, fields...)
	return scriptJob{s: s, id: id, keys: keys}
}

func (j scriptJob) start(owner string) string {
	res, err := startScript.Run(bg, j.s.rdb, []string{j.keys.record, j.keys.lease, j.keys.fence, j.keys.timeline, j.keys.applied, j.keys.marker},
		DeliveryID(j.id, 1), owner, 5000, time.Now().UnixMilli(), "w", 100, "0", 60000, "").Slice()
	if err != nil {
		return "error " + err.Error()
	}
	return res[0].(string)
}

func (j scriptJob) finish(token int64, owner, outcome string) string {
	res, err := finishScript.Run(bg, j.s.rdb, []string{j.keys.record, j.keys.lease, j.keys.timeline, j.keys.applied, j.keys.marker},
		token, owner, outcome, time.Now().UnixMilli(), "", "", 60000, 100, "0", 0, DeliveryID(j.id, 1), "", "w", "", "0", "0").Slice()
	if err != nil {
		return "error " + err.Error()
	}
	return res[0].(string)
}

func (j scriptJob) status() string { return j.s.rdb.HGet(bg, j.keys.record, "status").Val() }

// Every transition of DESIGN.md's table, and the forbidden ones, at the script level.
func TestTransitionTable(t *testing.T) {
	// start: queued, retrying and processing (a redelivery once the lease lapsed) may start; terminal
	// states are acknowledged.
	for from, want := range map[string]string{
		"queued": "run", "retrying": "run", "processing": "run", "done": "terminal", "failed": "terminal", "revoked": "terminal",
	} {
		j := newScriptJob(t, from, 3)
		if got := j.start("owner-2"); got != want {
			t.Errorf("start from %s: %s, want %s", from, got, want)
		}
		if want == "run" {
			if tok := j.s.rdb.HGet(bg, j.keys.record, "fencing_token").Val(); tok != "4" || j.status() != "processing" {
				t.Errorf("start from %s: token %s status %s", from, tok, j.status())
			}
		}
	}
	// finish from processing: every outcome of the table.
	for _, to := range []string{"done", "retrying", "failed", "revoked", "queued"} {
		j := newScriptJob(t, "processing", 5)
		if got := j.finish(5, "owner-1", to); got != "ok" || j.status() != to {
			t.Errorf("processing -> %s: %s, status %s", to, got, j.status())
		}
	}
	// finish from anything but processing is rejected and leaves the status.
	for _, from := range []string{"queued", "retrying", "done", "failed", "revoked"} {
		for _, to := range []string{"done", "failed"} {
			j := newScriptJob(t, from, 5)
			if got := j.finish(5, "owner-1", to); got != "invalid" || j.status() != from {
				t.Errorf("%s -> %s: %s, status %s", from, to, got, j.status())
			}
		}
	}
	// A stale token, or the same token from another owner, writes nothing but the event.
	for _, tc := range []struct {
		token int64
		owner string
	}{{4, "owner-1"}, {5, "owner-2"}} {
		j := newScriptJob(t, "processing", 5)
		if got := j.finish(tc.token, tc.owner, "done"); got != "stale" || j.status() != "processing" {
			t.Errorf("finish by %d/%s: %s, status %s", tc.token, tc.owner, got, j.status())
		}
		tl := strings.Join(j.s.rdb.LRange(bg, j.keys.timeline, 0, -1).Val(), "")
		if !strings.Contains(tl, "stale_write_rejected") {
			t.Errorf("no stale_write_rejected event: %s", tl)
		}
	}
}

// A start retried by go-redis (same owner) neither draws a second token nor counts a second attempt.
func TestRetriedStartIsIdempotent(t *testing.T) {
	j := newScriptJob(t, "queued", 0)
	j.s.rdb.HSet(bg, j.keys.record, "attempt", 0)
	for i := 0; i < 2; i++ {
		if got := j.start("same-owner"); got != "run" {
			t.Fatalf("start %d: %s", i, got)
		}
	}
	r := j.s.rdb.HGetAll(bg, j.keys.record).Val()
	if r["attempt"] != "1" || r["fencing_token"] != "1" || j.s.rdb.Get(bg, j.keys.fence).Val() != "1" {
		t.Fatalf("after a retried start: %v", r)
	}
	if got := j.start("other-owner"); got != "busy" {
		t.Fatalf("another owner: %s", got)
	}
}

// A fence counter that expired while the record holds a token does not go backwards.
func TestStartNeverLowersTheRecordsFence(t *testing.T) {
	j := newScriptJob(t, "failed", 9)
	j.s.rdb.HSet(bg, j.keys.record, "status", "queued")
	j.s.rdb.Del(bg, j.keys.fence)
	if got := j.start("owner-2"); got != "run" {
		t.Fatal(got)
	}
	if tok := j.s.rdb.HGet(bg, j.keys.record, "fencing_token").Val(); tok != "10" {
		t.Fatalf("token after a lost counter: %s, want 10", tok)
	}
	if got := j.finish(9, "owner-1", "done"); got != "stale" {
		t.Fatalf("the old token could write again: %s", got)
	}
}

// Retention: after many finished jobs and their retention, only live data is left.
func TestRetentionLeavesOnlyLiveData(t *testing.T) {
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
