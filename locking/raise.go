package locking

import (
	"context"
	"fmt"
)

// RaiseFence lifts resource's fence counter to at least floor, so the next acquisition draws a
// token above it. Use it when a store outside Redis (a SQL fence) refuses a token as stale while
// Redis's counter is lower than what that store has seen: the counter was lost (a failover that
// dropped the last writes, a flushed key) and restarted from below, and every new run would
// otherwise be refused there.
func (c *Client) RaiseFence(ctx context.Context, resource string, floor int64) (int64, error) {
	if err := ValidateResource(resource); err != nil {
		return 0, err
	}
	n, err := raiseScript.Run(ctx, c.rdb, []string{c.FenceKey(resource)}, floor).Int64()
	if err != nil {
		return 0, fmt.Errorf("locking: raise fence of %q: %w", resource, err)
	}
	return n, nil
}
