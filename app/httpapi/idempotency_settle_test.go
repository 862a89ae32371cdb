package httpapi

import (
	"context"
	"testing"
	"time"
)

// A stop waits for the settlements running, and only for them: one started after the others ended
// (a request still in flight when the stop waits) is waited for too.
func TestSettleWaitsForTheSettlementsRunning(t *testing.T) {
	t.Parallel()
	a := &API{settling: &settlements{}}
	settled := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		a.Settle(ctx)
		return ctx.Err() == nil
	}
	if !settled() {
		t.Fatal("Settle waited with nothing running")
	}
	for round := range 2 {
		a.settling.start()
		a.settling.start()
		a.settling.end()
		if settled() {
			t.Fatalf("round %d: Settle returned with a settlement running", round)
		}
		a.settling.end()
		if !settled() {
			t.Fatalf("round %d: Settle still waited once every settlement ended", round)
		}
	}
}
