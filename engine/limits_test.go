package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/faultproxy"
	"github.com/jobguard/jobguard/internal/redistest"
)

// peaks counts the handlers running at once per key, across every stack of a test.
type peaks struct {
	mu        sync.Mutex
	now, peak map[string]int
}

func newPeaks() *peaks { return &peaks{now: map[string]int{}, peak: map[string]int{}} }

func (p *peaks) enter(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.now[key]++
	p.peak[key] = max(p.peak[key], p.now[key])
}

func (p *peaks) leave(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.now[key]--
}

func (p *peaks) max(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peak[key]
}

// Concurrency 3 per key across five asynq servers (five Stacks, each on its own Redis client, in
// this test process): the handlers of one key never run more than 3 at once, while one holder is
// paused past its lease ignoring its context (a zombie keeps its slot: it still runs), and one
// server is cut off from Redis mid-run (its handler is stopped before its slot lapses in Redis,
// and the slot is recovered). Every job ends done; waits are on the jobs' timelines.
func TestConcurrencyLimitPerKeyAcrossServers(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	px, err := faultproxy.New(db.Server.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.Close)
	const ttl = 2 * time.Second
	p := newPeaks()
	var paused, cut atomic.Bool
	cutStarted, cutStopped, reconnected := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var hs []*harness
	for i := range 5 {
		opts := &redis.Options{Addr: db.Server.Addr, DB: db.N}
		if i == 4 {
			opts = &redis.Options{Addr: px.Addr(), DB: db.N, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, DialerRetries: 1}
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
					p.enter(key)
					left := false
					defer func() {
						if !left {
							p.leave(key)
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
						p.leave(key) // the work stops here; the answer waits for Redis (asynq's retry needs it)
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
	select {
	case <-cutStarted:
	case <-time.After(20 * time.Second):
		t.Fatal("no run of key a started on the server to cut off")
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
	if got := p.max("a"); got != 3 {
		t.Errorf("key a ran %d at once, want 3 at most and reached", got)
	}
	if got := p.max("b"); got > 3 {
		t.Errorf("key b ran %d at once", got)
	}
	if !paused.Load() || !cut.Load() || !sawWait {
		t.Errorf("paused %v cut %v limit_wait on a timeline %v", paused.Load(), cut.Load(), sawWait)
	}
	t.Logf("max at once: key a %d, key b %d", p.max("a"), p.max("b"))
}
