package loop

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// Every calls its function until the context ends, and not after Every returned.
func TestEveryCallsUntilTheContextEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	var calls atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, time.Millisecond, func() {
			if calls.Add(1) == 3 {
				cancel()
			}
		})
	}()
	<-done
	after := calls.Load()
	time.Sleep(10 * time.Millisecond)
	if after < 3 || calls.Load() != after {
		t.Fatalf("%d calls, then %d after Every returned", after, calls.Load())
	}
}
