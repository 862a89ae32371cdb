package engine

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
)

// cutOff is what the handler of TestLimitValidForLapsesBeforeRedisFreesTheSlot saw.
type cutOff struct {
	validAtStart time.Duration
	lapsedAfter  time.Duration // from the cut to LimitValidFor's 0
	liveInRedis  bool          // the holder entry, read straight from Redis just after the 0
	ended        bool          // the handler's context, then
}

// A run cut off from Redis: LimitValidFor falls to 0 while Redis still holds the run's slot (so
// before any other process can take it), and the job is done once Redis answers again. (The
// lease's keeper stops the run's context at its first failed renewal, before the slot lapses:
// TestLimitValidForCancelsALapsedRun tests the slot's own cancellation.)
func TestLimitValidForLapsesBeforeRedisFreesTheSlot(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	px, cutOffOpts := cutOffable(t, db)
	const ttl = 2 * time.Second
	worker := redis.NewClient(cutOffOpts)
	t.Cleanup(func() { worker.Close() })
	started, cutAt, seen, reconnected := make(chan time.Duration, 1), make(chan time.Time, 1), make(chan cutOff, 1), make(chan struct{})
	var once sync.Once
	h := newHarnessOn(t, db, worker, Config{LeaseTTL: ttl, Concurrency: 1}, func(s *Stack) {
		s.Register(TaskConfig{Type: "lim-valid", MaxAttempts: 5, Limit: Limit{Concurrency: 1}}, func(ctx context.Context, j *Job) error {
			first := false
			once.Do(func() { first = true })
			if !first {
				return nil
			}
			c := cutOff{validAtStart: j.LimitValidFor()}
			started <- c.validAtStart
			from := <-cutAt
			for j.LimitValidFor() > 0 {
				time.Sleep(5 * time.Millisecond)
			}
			c.lapsedAfter = time.Since(from)
			c.liveInRedis = holderLive(db.Client, LimitHoldersKey(s.Locks(), "lim-valid", "*"), j.Fence().Owner)
			select {
			case <-ctx.Done():
				c.ended = true
			case <-time.After(5 * time.Second):
			}
			seen <- c
			<-reconnected // the answer needs Redis
			return context.Cause(ctx)
		})
	})
	id := h.enqueue(Spec{Type: "lim-valid"})
	var valid time.Duration
	select {
	case valid = <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the limited job did not start")
	}
	if valid <= 0 || valid > ttl-ttl/5 {
		t.Fatalf("LimitValidFor at the start %s, want within (0, %s]", valid, ttl-ttl/5)
	}
	px.Block()
	cutAt <- time.Now()
	c := <-seen
	px.Unblock()
	close(reconnected)
	if !c.liveInRedis {
		t.Errorf("LimitValidFor fell to 0 %s after the cut, when Redis had freed the slot already", c.lapsedAfter.Round(time.Millisecond))
	}
	if !c.ended {
		t.Error("the cut-off run's context did not end")
	}
	h.waitStatus(id, "done", 30*time.Second)
	t.Logf("valid for %s at the start; 0 after %s of the cut, Redis's holder entry still live", valid.Round(time.Millisecond), c.lapsedAfter.Round(time.Millisecond))
}

// A handler that resumes from a pause past its slot's TTL may run before the timer that cancels
// its context: LimitValidFor reads the clock itself, and the context is cancelled (ErrSlotLost)
// by the time it returns 0. The slot stays lost even if a renewal lands afterwards.
func TestLimitValidForCancelsALapsedRun(t *testing.T) {
	t.Parallel()
	l := newLimiter(nil) // no renewals: the loop is never started
	const ttl = 2 * time.Second
	sl := &slot{ttl: ttl, extended: time.Now()}
	l.held[sl] = true
	ctx, stop := l.watch(bg, sl)
	defer stop()
	j := &Job{slot: sl, limits: l}
	if v := j.LimitValidFor(); v <= 0 || v > ttl-ttl/5 {
		t.Fatalf("LimitValidFor of a fresh slot %s", v)
	}
	// The process "was stopped" for longer than the TTL: its clock moved on, the timer has not run.
	l.mu.Lock()
	sl.extended = sl.extended.Add(-ttl - time.Second)
	l.mu.Unlock()
	if v := j.LimitValidFor(); v != 0 {
		t.Fatalf("LimitValidFor of a lapsed slot %s", v)
	}
	if cause := context.Cause(ctx); !errors.Is(cause, ErrSlotLost) {
		t.Fatalf("after LimitValidFor's 0 the run's context says %v, want ErrSlotLost", cause)
	}
	l.mu.Lock()
	sl.extended = time.Now() // a renewal sent before the pause, answered after it
	l.mu.Unlock()
	if v := j.LimitValidFor(); v != 0 {
		t.Fatalf("a lost slot came back: LimitValidFor %s", v)
	}
}

// holderLive reports whether owner's entry in holders has an expiry after Redis's now.
func holderLive(rdb *redis.Client, holders, owner string) bool {
	pipe := rdb.Pipeline()
	now := pipe.Time(bg)
	exp := pipe.ZScore(bg, holders, owner)
	if _, err := pipe.Exec(bg); err != nil {
		return false
	}
	return exp.Val() > float64(now.Val().UnixMilli())
}

// A run without a concurrency slot has none to lose: LimitValidFor is the largest Duration.
// LimitStart is the start the rate granted (Redis's clock), zero for a job with no limit.
func TestLimitValidForWithoutASlot(t *testing.T) {
	t.Parallel()
	type saw struct {
		valid time.Duration
		start time.Time
	}
	got := make(chan saw, 2)
	h := newHarness(t, Config{}, func(s *Stack) {
		record := func(ctx context.Context, j *Job) error {
			got <- saw{j.LimitValidFor(), j.LimitStart()}
			return nil
		}
		s.Register(TaskConfig{Type: "free"}, record)
		s.Register(TaskConfig{Type: "rate-only", Limit: Limit{Rate: 100}}, record)
	})
	for _, typ := range []string{"free", "rate-only"} {
		before := time.Now()
		h.waitStatus(h.enqueue(Spec{Type: typ}), "done", 20*time.Second)
		s := <-got
		if s.valid != time.Duration(math.MaxInt64) {
			t.Errorf("%s: LimitValidFor %s, want the largest Duration", typ, s.valid)
		}
		switch {
		case typ == "free" && !s.start.IsZero():
			t.Errorf("free: LimitStart %s, want zero", s.start)
		case typ == "rate-only" && (s.start.Before(before.Add(-5*time.Second)) || s.start.After(time.Now().Add(5*time.Second))):
			t.Errorf("rate-only: LimitStart %s, not near the run (%s)", s.start, before)
		}
	}
}
