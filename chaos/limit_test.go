package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/locking"
	"github.com/jobguard/jobguard/tasks/reservestock"
)

// The chaos suite limits reserve-stock to limitPerTenant running jobs per tenant (its key), so
// that the limit's slots go through the same kills, pauses, partitions and Redis restarts as the
// leases.
const limitPerTenant = 2

// limitEnv is the workers' setting of that limit.
var limitEnv = fmt.Sprintf("TASK_LIMITS=%s=concurrency:%d", reservestock.TypeReserveStock, limitPerTenant)

// limitWatch is what sampling a limit's slots saw: the most live holders of one key at once (a
// holder whose expiry has passed in Redis's clock is not live: its slot has lapsed), and the
// samples with a key over its limit.
type limitWatch struct {
	keys                []string // the keys' holders (engine.LimitHoldersKey)
	limit               int64
	most, samples, over atomic.Int64
}

// keyspace spells the processes' keys (their KEY_PREFIX is the default, jobguard).
var keyspace = locking.New(nil, locking.WithPrefix("jobguard"))

// holdersKey is the sorted set of a tenant's reserve-stock slots.
func holdersKey(tenant string) string {
	return engine.LimitHoldersKey(keyspace, reservestock.TypeReserveStock, tenant)
}

// watchLimit samples every tenant's reserve-stock slots every 20 ms until stop is closed.
func (r *run) watchLimit(stop <-chan struct{}, tenants []string) *limitWatch {
	keys := make([]string, len(tenants))
	for i, t := range tenants {
		keys[i] = holdersKey(t)
	}
	return r.watchHolders(stop, keys, limitPerTenant)
}

// watchHolders samples the holders keys every 20 ms until stop is closed, against a limit.
func (r *run) watchHolders(stop <-chan struct{}, keys []string, limit int) *limitWatch {
	w := &limitWatch{keys: keys, limit: int64(limit)}
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				w.sample(r.rdb)
			}
		}
	}()
	return w
}

// sample reads Redis's clock and every key's holders in one round trip and counts the live ones.
func (w *limitWatch) sample(rdb redis.UniversalClient) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	pipe := rdb.Pipeline()
	now := pipe.Time(ctx)
	sets := make([]*redis.ZSliceCmd, len(w.keys))
	for i, k := range w.keys {
		sets[i] = pipe.ZRangeWithScores(ctx, k, 0, -1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return // Redis restarting or stalled: no sample
	}
	ms := float64(now.Val().UnixMilli())
	w.samples.Add(1)
	for _, s := range sets {
		live := int64(0)
		for _, z := range s.Val() {
			if z.Score > ms {
				live++
			}
		}
		if live > w.most.Load() {
			w.most.Store(live)
		}
		if live > w.limit {
			w.over.Add(1)
		}
	}
}

// limitWaits counts the limit_wait events in the timelines: how often a start found every slot taken.
func (r *run) limitWaits() int {
	ctx, n := context.Background(), 0
	for _, k := range scanKeys(r.rdb, "jobguard:*:timeline") {
		for _, e := range r.rdb.LRange(ctx, k, 0, -1).Val() {
			if strings.Contains(e, `"limit_wait"`) {
				n++
			}
		}
	}
	return n
}

// limitInvariants prints the limit's figures and fails the run on a tenant over its limit.
func (r *run) limitInvariants(w *limitWatch) {
	fmt.Printf("| reserve-stock limit %d per tenant: most live slots of a tenant at once / samples / over the limit / limit waits | %d / %d / %d / %d |\n",
		limitPerTenant, w.most.Load(), w.samples.Load(), w.over.Load(), r.limitWaits())
	if n := w.over.Load(); n > 0 {
		t := r.t
		t.Errorf("invariant: %d samples saw a tenant holding more than %d reserve-stock slots", n, limitPerTenant)
	}
}
