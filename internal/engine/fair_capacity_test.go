package engine

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/redistest"
)

// A fair type without a Capacity of its own admits as many jobs as the live servers that serve it
// have handlers: on two workers of 3 handlers, a lone key runs 6 jobs at once (not one process's
// 3), and no more; once a worker has stopped, the next count is the other's 3.
func TestFairDefaultCapacityIsTheLiveHandlers(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	var running, peak atomic.Int64
	release := make(chan struct{})
	tc := TaskConfig{Type: "fair-live", Fair: &Fair{}}
	handle := func(ctx context.Context, j *Job) error {
		n := running.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		<-release
		running.Add(-1)
		return nil
	}
	var hs []*harness
	for i := range 2 {
		hs = append(hs, newHarnessOn(t, db, db.Client, Config{Concurrency: 3, WorkerID: fmt.Sprintf("w%d", i)},
			func(s *Stack) { s.Register(tc, handle) }))
	}
	awaitLiveHandlers(t, hs[0], "fair-live", 6)
	if c, err := hs[0].stack.FairCounts(bg, "fair-live", 0); err != nil || c.Capacity != 6 {
		t.Errorf("FairCounts' capacity: %d (%v); want the 6 live handlers", c.Capacity, err)
	}
	want := `
# HELP jobguard_fair_capacity The most jobs of a fairly dispatched type admitted at once now: its Capacity, or the live handlers that serve it.
# TYPE jobguard_fair_capacity gauge
jobguard_fair_capacity{type="fair-live"} 6
`
	if err := testutil.CollectAndCompare(hs[0].stack.m.fair, strings.NewReader(want), "jobguard_fair_capacity"); err != nil {
		t.Errorf("the capacity gauge: %v", err)
	}
	var ids []string
	for range 12 {
		ids = append(ids, hs[0].enqueue(Spec{Type: "fair-live", Tenant: "lone"}))
	}
	for deadline := time.Now().Add(5 * time.Second); running.Load() < 6 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // time for a seventh to start, were one admitted
	if n := peak.Load(); n != 6 {
		t.Errorf("a lone key ran %d jobs at once on 2 workers of 3 handlers; want 6", n)
	}
	close(release)
	for _, id := range ids {
		hs[0].waitStatus(id, "done", 10*time.Second)
	}

	// One process counts for the fleet in each period: the other's sweep, due by its own clock,
	// finds the period claimed and leaves the count alone.
	awaitLiveHandlers(t, hs[0], "fair-live", 6) // hs[0] claims this period
	k := hs[1].stack.store.FairKeys(jobstore.FairShard{Type: "fair-live"})
	db.Client.Del(bg, k.Handlers)
	if _, err := hs[1].stack.SweepFair(bg); err != nil {
		t.Fatal(err)
	}
	if n, err := db.Client.Exists(bg, k.Handlers).Result(); err != nil || n != 0 {
		t.Errorf("a second process counted within the period claimed (%d, %v)", n, err)
	}

	hs[1].stop()
	awaitLiveHandlers(t, hs[0], "fair-live", 3)
	if c, err := hs[0].stack.FairCounts(bg, "fair-live", 0); err != nil || c.Capacity != 3 {
		t.Errorf("FairCounts' capacity after a worker stopped: %d (%v); want 3", c.Capacity, err)
	}
}

// awaitLiveHandlers sweeps until h's count of typ's live handlers is want (a server's first
// heartbeat comes just after its start).
func awaitLiveHandlers(t *testing.T, h *harness, typ string, want int) {
	t.Helper()
	k := h.stack.store.FairKeys(jobstore.FairShard{Type: typ})
	n, err := 0, error(nil)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		c := &h.stack.fairHandlers // the sweep counts at once
		c.mu.Lock()
		c.last = time.Time{}
		c.mu.Unlock()
		h.rdb.Del(bg, h.stack.store.FairCountClaimKey())
		if _, err = h.stack.SweepFair(bg); err != nil {
			t.Fatal(err)
		}
		if n, err = h.rdb.Get(bg, k.Handlers).Int(); err == nil && n == want {
			return
		}
	}
	t.Fatalf("live handlers of %s: %d (%v); want %d", typ, n, err, want)
}
