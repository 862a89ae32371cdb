// Package loop is the one background loop of jobguard's passes (rescue, reconcile, the lease
// level's rescue): call a function every interval until the context ends.
package loop

import (
	"context"
	"time"
)

// Every calls fn each interval until ctx ends; the first call is one interval after the start.
func Every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}
