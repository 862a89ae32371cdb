package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// A fairly dispatched type with a rate limit keeps a key over its rate in the admission layer: 8
// jobs of key "slow" at 5 starts a second (burst 1), with room for all of them in the capacity,
// start spread over 7 intervals (Redis's and this process's clocks differ by little),
// and with 0 bounces (before, the jobs past SlotWait's worth of tokens were
// admitted at once and bounced through asynq to wait); key "other", enqueued after them, is not
// held up behind them. Its admission keys leave nothing behind.
func TestFairRateLimitParksTheKeyWithoutBounces(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	starts := map[string][]time.Time{}
	order := []string{}
	h := newHarness(t, Config{Concurrency: 16}, func(s *Stack) {
		s.Register(TaskConfig{Type: "rated", Fair: &Fair{Capacity: 16},
			Limit: Limit{Rate: 5, Per: time.Second, Key: func(s Spec) string { return s.Tenant }}},
			func(ctx context.Context, j *Job) error {
				mu.Lock()
				defer mu.Unlock()
				key, n, _ := strings.Cut(string(j.Payload), ":")
				starts[key] = append(starts[key], time.Now())
				if key == "slow" {
					order = append(order, n)
				}
				return nil
			})
	})
	var slow []string
	for i := range 8 {
		slow = append(slow, h.enqueue(Spec{Type: "rated", Tenant: "slow", Payload: []byte(fmt.Sprint("slow:", i))}))
	}
	other := h.enqueue(Spec{Type: "rated", Tenant: "other", Payload: []byte("other:x")})
	for _, id := range append(slow, other) {
		h.waitStatus(id, "done", 10*time.Second)
	}
	mu.Lock()
	defer mu.Unlock()
	// Each job ran once. Their start order is not asserted: the key has no sequence, so two of its
	// jobs admitted 200 ms apart may start in either order when asynq's pickup of the first stalls
	// that long (a fresh-clone CI run under -race saw 6 start before 5); order across admissions
	// is a sequence's guarantee (TestFairSequenceRunsInOrderAcrossRetries).
	if got := slices.Sorted(slices.Values(order)); !slices.Equal(got, []string{"0", "1", "2", "3", "4", "5", "6", "7"}) {
		t.Fatalf("key slow's jobs ran %v, want each of 0-7 once", order)
	}
	// The admissions are spaced on Redis's clock; a start follows its admission after asynq's
	// pickup, whose delay varies by tens of ms (one pair of starts was 131 ms apart on a loaded
	// machine), so the bound is on the span of the 8 starts: 7 intervals of 200 ms, less one pickup's
	// jitter at each end.
	s := starts["slow"]
	if span := s[len(s)-1].Sub(s[0]); span < 7*200*time.Millisecond-150*time.Millisecond {
		t.Fatalf("key slow's 8 starts spanned %s: over the rate of 5/s", span)
	}
	if !starts["other"][0].Before(s[len(s)-1]) {
		t.Fatalf("key other's job started at %s, after key slow's last (%s): held up behind a parked key", starts["other"][0], s[len(s)-1])
	}
	if n := h.stack.Stats.Bounces.Load(); n != 0 {
		t.Fatalf("%d bounces: a key over its rate must wait in the admission layer", n)
	}
	waitFairIdle(t, h, "rated")
}
