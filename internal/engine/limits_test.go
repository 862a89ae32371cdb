package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// Concurrency 3 per key across five asynq servers (five Stacks, each on its own Redis client, in
// this test process): the handlers of one key never run more than 3 at once, while one holder is
// paused past its lease ignoring its context (a zombie keeps its slot: it still runs), and one
// server is cut off from Redis mid-run (its handler is stopped before its slot lapses in Redis,
// and the slot is recovered). Every job ends done; waits are on the jobs' timelines.
func TestConcurrencyLimitPerKeyAcrossServers(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	px, cutOffOpts := cutOffable(t, db)
	const ttl = 2 * time.Second
	p := testsupport.NewPeaks()
	var paused, cut atomic.Bool
	cutStarted, cutStopped, reconnected := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var hs []*harness
	for i := range 5 {
		opts := &redis.Options{Addr: db.Server.Addr, DB: db.N}
		if i == 4 {
			opts = cutOffOpts
		}
		worker := redis.NewClient(opts)
		t.Cleanup(func() { worker.Close() })
		onCut := i == 4
		// The server to cut off runs one handler: asynq's own answer for a delivery it dequeued
		// while cut off (a bounce) waits for asynq's lease recovery, far longer than this test.
		conc := 4
		if onCut {
			conc = 1
		}
		hs = append(hs, newHarnessOn(t, db, worker, Config{LeaseTTL: ttl, Concurrency: conc, WorkerID: fmt.Sprintf("w%d", i)}, func(s *Stack) {
			s.Register(TaskConfig{Type: "lim", MaxAttempts: 50, Limit: Limit{Concurrency: 3, Key: func(sp Spec) string { return sp.Tenant }}},
				func(ctx context.Context, j *Job) error {
					key := string(j.Payload)
					p.Enter(key)
					left := false
					defer func() {
						if !left {
							p.Leave(key)
						}
					}()
					switch {
					case key == "a" && j.LimitToken() == 0:
						t.Errorf("a limited run holds no slot token")
					case key == "a" && !onCut && paused.CompareAndSwap(false, true):
						time.Sleep(2*ttl + 500*time.Millisecond) // paused past its lease, context ignored
						return nil
					case key == "a" && onCut && cut.CompareAndSwap(false, true):
						close(cutStarted)
						<-ctx.Done()
						p.Leave(key) // the work stops here; the answer waits for Redis (asynq's retry needs it)
						left = true
						close(cutStopped)
						<-reconnected
						return ctx.Err()
					}
					select {
					case <-time.After(150 * time.Millisecond):
					case <-ctx.Done():
						return ctx.Err()
					}
					return nil
				})
		}))
	}
	var ids []string
	for i := range 40 {
		ids = append(ids, hs[0].enqueue(Spec{Type: "lim", Tenant: "a", Payload: []byte("a")}))
		if i%8 == 0 {
			ids = append(ids, hs[0].enqueue(Spec{Type: "lim", Tenant: "b", Payload: []byte("b")}))
		}
	}
	// The cut-off server's one handler meets key a's slots held by the others' runs: the 40 jobs
	// may all run elsewhere first (twice inside .ci/run's full parallel package under -race), so
	// more of key a come until one starts there.
	more := time.NewTicker(500 * time.Millisecond)
	defer more.Stop()
	for waiting, giveUp := true, time.After(60*time.Second); waiting; {
		select {
		case <-cutStarted:
			waiting = false
		case <-more.C:
			for range 4 {
				ids = append(ids, hs[0].enqueue(Spec{Type: "lim", Tenant: "a", Payload: []byte("a")}))
			}
		case <-giveUp:
			t.Fatal("no run of key a started on the server to cut off")
		}
	}
	px.Block()
	select {
	case <-cutStopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the cut-off server's handler was not stopped")
	}
	time.Sleep(ttl) // the cut lasts past the slot's TTL: Redis frees it
	px.Unblock()
	close(reconnected)
	sawWait := false
	for _, id := range ids {
		v := hs[0].waitStatus(id, "done", 30*time.Second)
		sawWait = sawWait || has(v, "limit_wait")
	}
	if got := p.Max("a"); got != 3 {
		t.Errorf("key a ran %d at once, want 3 at most and reached", got)
	}
	if got := p.Max("b"); got > 3 {
		t.Errorf("key b ran %d at once", got)
	}
	if !paused.Load() || !cut.Load() || !sawWait {
		t.Errorf("paused %v cut %v limit_wait on a timeline %v", paused.Load(), cut.Load(), sawWait)
	}
	t.Logf("max at once: key a %d, key b %d", p.Max("a"), p.Max("b"))
}

// A rate of 10 starts per second per key (burst 1), on three servers (three Stacks on their own
// clients) and 200 jobs of one key: no window of the run holds more starts than the rate allows
// plus one token, and the rate is used (the figure is logged). About 20 s.
func TestRateLimitPerKeyHolds(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	const rate, jobs = 10, 200
	var mu sync.Mutex
	var starts []time.Time
	var hs []*harness
	for i := range 3 {
		worker := redis.NewClient(&redis.Options{Addr: db.Server.Addr, DB: db.N})
		t.Cleanup(func() { worker.Close() })
		hs = append(hs, newHarnessOn(t, db, worker, Config{Concurrency: 4, WorkerID: fmt.Sprintf("w%d", i)}, func(s *Stack) {
			s.Register(TaskConfig{Type: "rated", Limit: Limit{Rate: rate, Key: func(sp Spec) string { return sp.Tenant }}},
				func(ctx context.Context, j *Job) error {
					mu.Lock()
					starts = append(starts, j.slot.at) // the start the rate granted, in Redis's clock
					mu.Unlock()
					return nil
				})
		}))
	}
	var ids []string
	for range jobs {
		ids = append(ids, hs[0].enqueue(Spec{Type: "rated", Tenant: "a"}))
	}
	for _, id := range ids {
		hs[0].waitStatus(id, "done", 60*time.Second)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	const slack = 0 // the granted starts are Redis's own instants (ms)
	worst := 0.0
	for i := range starts {
		for j := i + 1; j < len(starts); j++ {
			span := starts[j].Sub(starts[i]) + slack
			allowed := float64(rate)*span.Seconds() + 1
			worst = math.Max(worst, float64(j-i+1)-allowed)
			if float64(j-i+1) > allowed+1e-9 {
				t.Fatalf("%d starts within %s: the rate allows %.2f", j-i+1, span, allowed)
			}
		}
	}
	total := starts[len(starts)-1].Sub(starts[0])
	t.Logf("%d starts in %s: %.2f per second (limit %d); worst window %.2f starts above rate x span + 1 (<= 0 holds)", len(starts), total.Round(time.Millisecond),
		float64(len(starts)-1)/total.Seconds(), rate, worst)
}

// A handler's RateLimited feeds its key's limit: the key's next start waits for the upstream's
// Retry-After, and the waiting job's timeline says why.
func TestRateLimitedPushesTheKeyBack(t *testing.T) {
	t.Parallel()
	const after = 3 * time.Second
	var mu sync.Mutex
	startOf := map[string]time.Time{}
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "upstream", Limit: Limit{Concurrency: 5, Key: func(sp Spec) string { return sp.Tenant }}},
			func(ctx context.Context, j *Job) error {
				mu.Lock()
				defer mu.Unlock()
				if _, seen := startOf[j.ID]; !seen {
					startOf[j.ID] = time.Now()
					if string(j.Payload) == "first" {
						return RateLimited(errors.New("upstream: HTTP 429"), after)
					}
				}
				return nil
			})
	})
	first := h.enqueue(Spec{Type: "upstream", Tenant: "a", Payload: []byte("first")})
	h.waitStatus(first, "retrying", 10*time.Second)
	pushed := time.Now()
	second := h.enqueue(Spec{Type: "upstream", Tenant: "a"})
	other := h.enqueue(Spec{Type: "upstream", Tenant: "b"})
	v := h.waitStatus(second, "done", 20*time.Second)
	h.waitStatus(other, "done", 20*time.Second)
	mu.Lock()
	waited, otherWaited := startOf[second].Sub(pushed), startOf[other].Sub(pushed)
	mu.Unlock()
	if waited < after-500*time.Millisecond {
		t.Fatalf("the key's next start came %s after the push-back of %s", waited, after)
	}
	if otherWaited >= after {
		t.Errorf("another key's job waited %s", otherWaited)
	}
	var why string
	for _, e := range v.Timeline {
		if e.Event == "limit_wait" {
			why = e.Detail
		}
	}
	if !strings.Contains(why, "pushed back") {
		t.Fatalf("timeline %v, limit_wait %q", events(v), why)
	}
	t.Logf("next start of the key %s after the push-back (%s); another key's %s", waited.Round(time.Millisecond), after, otherWaited.Round(time.Millisecond))
}

// The limit key travels with every job of a type that has a Key, limited here or not (the
// workers' own limits decide); a type without Key or limit carries none.
func TestLimitKeyHeader(t *testing.T) {
	t.Parallel()
	keyed := TaskConfig{Limit: Limit{Key: func(s Spec) string { return s.Tenant }}}
	if h := limitHeaders(keyed, Spec{Tenant: "a", Headers: map[string]string{"x": "1"}}); h[HeaderLimitKey] != "a" || h["x"] != "1" {
		t.Fatalf("keyed: %v", h)
	}
	if h := limitHeaders(keyed, Spec{Tenant: ""}); h[HeaderLimitKey] != "" {
		t.Fatalf("a job whose key is empty carries one: %v", h)
	}
	if h := limitHeaders(TaskConfig{}, Spec{Tenant: "a"}); h[HeaderLimitKey] != "" {
		t.Fatalf("unlimited: %v", h)
	}
	if h := limitHeaders(TaskConfig{Limit: Limit{Concurrency: 2}}, Spec{}); h[HeaderLimitKey] != "*" {
		t.Fatalf("one key for the type: %v", h)
	}
	s := New(redistest.NewDB(t).Client, Config{})
	defer s.Close()
	defer func() {
		if recover() == nil {
			t.Error("a rate of more than one start per millisecond was registered")
		}
	}()
	s.Register(TaskConfig{Type: "fast", Limit: Limit{Rate: 5000}}, nil)
}

// A replayed job keeps its limit: the replay's delivery carries the job's limit key, so its run
// takes a slot of its tenant like the first one did.
func TestAReplayedJobKeepsItsLimit(t *testing.T) {
	t.Parallel()
	var tokens []int64
	var mu sync.Mutex
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "lim-replay", MaxAttempts: 1, Limit: Limit{Concurrency: 1, Key: func(sp Spec) string { return sp.Tenant }}},
			func(ctx context.Context, j *Job) error {
				mu.Lock()
				defer mu.Unlock()
				tokens = append(tokens, j.LimitToken())
				if len(tokens) == 1 {
					return Permanent(errors.New("first run fails"))
				}
				return nil
			})
	})
	id := h.enqueue(Spec{Type: "lim-replay", Tenant: "a"})
	h.waitStatus(id, "failed", 10*time.Second)
	if _, err := h.stack.Replay(bg, h.client, id); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, "done", 15*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(tokens) != 2 || tokens[0] == 0 || tokens[1] <= tokens[0] {
		t.Fatalf("slot tokens of the runs %v: the replay's run held no slot of its key", tokens)
	}
}
