package locking

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
)

func TestKeeperRenewsUntilStopped(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp topology) {
		c := tp.client()
		k := c.NewKeeper(WithTick(10 * time.Millisecond))
		defer k.Close()
		// A TTL long enough that a loaded machine's slow round trip is not a lost lease; the
		// keeper renews at a third of it, so three TTLs are many renewals.
		l, _ := c.TryAcquire(bg(), "r", time.Second)
		ctx, stop := k.Keep(bg(), l)
		time.Sleep(3 * time.Second)
		if ctx.Err() != nil || l.Expired() {
			t.Fatalf("a kept lease was lost: %v", context.Cause(ctx))
		}
		if info, _ := c.Inspect(bg(), "r"); info.Owner != l.Owner {
			t.Fatalf("owner after three TTLs: %+v", info)
		}
		stop()
		stop()
		if !errors.Is(ctx.Err(), context.Canceled) || errors.Is(context.Cause(ctx), ErrLeaseLost) || k.Held() != 0 {
			t.Fatalf("after stop: %v / %v, held %d", ctx.Err(), context.Cause(ctx), k.Held())
		}
		if err := l.Release(bg()); err != nil {
			t.Fatalf("release after stop: %v", err)
		}
	})
}

func TestKeeperCancelsWhenTakenOver(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp topology) {
		c := tp.client()
		k := c.NewKeeper(WithTick(10 * time.Millisecond))
		defer k.Close()
		l, _ := c.TryAcquire(bg(), "r", 300*time.Millisecond)
		ctx, stop := k.Keep(bg(), l)
		defer stop()
		// Another owner takes the resource (as after a failover that lost the lease).
		tp.rdb.Set(bg(), c.LeaseKey("r"), "someone-else", time.Minute)
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
			t.Fatal("the work's context was not cancelled")
		}
		if cause := context.Cause(ctx); !errors.Is(cause, ErrLeaseLost) || errors.Is(cause, ErrRenewFailed) {
			t.Fatalf("cause %v", cause)
		}
		if !l.Expired() || !errors.Is(l.Renew(bg()), ErrLeaseLost) {
			t.Fatal("a lost lease is still trusted")
		}
		if v := tp.rdb.Get(bg(), c.LeaseKey("r")).Val(); v != "someone-else" {
			t.Fatalf("the lost holder touched the new lease: %q", v)
		}
	})
}

// With Redis gone, the work is cancelled no later than the lease's validity, by the first renewal
// that fails (renewals start at a third of the TTL, well before the validity runs out).
func TestKeeperCancelsWhenRedisIsGone(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 50 * time.Millisecond, DialerRetries: 1})
	defer rdb.Close()
	c := New(rdb)
	k := c.NewKeeper(WithTick(10 * time.Millisecond))
	defer k.Close()
	l, err := c.TryAcquire(bg(), "r", 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := k.Keep(bg(), l)
	defer stop()
	srv.Kill()
	select {
	case <-ctx.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("not cancelled with Redis gone")
	}
	if cause := context.Cause(ctx); !errors.Is(cause, ErrRenewFailed) || !errors.Is(cause, ErrLeaseLost) || !l.Expired() {
		t.Fatalf("cause %v", cause)
	}
}

// countPipelines counts round trips per node: every pipeline (and every single command) a node's
// client sends.
type countPipelines struct{ n atomic.Int64 }

func (h *countPipelines) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake(cmd) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *countPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !handshake(cmds[0]) {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// handshake tells the commands go-redis sends to set up a new connection, which are not round trips
// of the work being measured.
func handshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "select", "client", "auth", "readonly":
		return true
	}
	return false
}

// Renewing 1,000 leases costs one round trip per node per tick.
func TestKeeperBatchesRenewals(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp topology) {
		counter := &countPipelines{}
		var rdb redis.UniversalClient
		nodes := 1
		if tp.name == "cluster" {
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: tp.rdb.(*redis.ClusterClient).Options().Addrs})
			cc.OnNewNode(func(n *redis.Client) { n.AddHook(counter) })
			rdb, nodes = cc, 3
		} else {
			o := tp.rdb.(*redis.Client).Options()
			sc := redis.NewClient(&redis.Options{Addr: o.Addr, DB: o.DB})
			sc.AddHook(counter)
			rdb = sc
		}
		defer rdb.Close()
		c := New(rdb, WithPrefix(tp.prefix))
		k := c.NewKeeper(WithTick(time.Hour)) // renewals only when asked
		defer k.Close()
		const n = 1000
		for i := 0; i < n; i++ {
			l, err := c.TryAcquire(bg(), "r"+itoa(int64(i)), time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			_, stop := k.Keep(bg(), l)
			defer stop()
		}
		_ = renewScript.Load(bg(), rdb)
		counter.n.Store(0)
		k.RenewNow()
		got := counter.n.Load()
		t.Logf("%s: %d leases renewed in %d round trips (%d nodes)", tp.name, n, got, nodes)
		if got > int64(nodes) || k.Held() != n {
			t.Fatalf("%d round trips for one tick of %d leases on %d nodes; %d still held", got, n, nodes, k.Held())
		}
	})
}

// Renewals stamp the lease's heartbeat into a hash of its slot.
func TestKeeperStampsHeartbeats(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp topology) {
		c := tp.client()
		k := c.NewKeeper(WithTick(time.Hour))
		defer k.Close()
		record := c.Key("r", "job:1")
		tp.rdb.HSet(bg(), record, "status", "processing")
		l, _ := c.TryAcquire(bg(), "r", time.Minute)
		l.StampHeartbeat(record, "heartbeat_at")
		_, stop := k.Keep(bg(), l)
		defer stop()
		before := time.Now().UnixMilli()
		k.RenewNow()
		beat, _ := tp.rdb.HGet(bg(), record, "heartbeat_at").Int64()
		if beat < before {
			t.Fatalf("heartbeat %d, renewed at or after %d", beat, before)
		}
		if err := l.Renew(bg()); err != nil {
			t.Fatal(err)
		}
		// A missing record is not recreated by a heartbeat.
		tp.rdb.Del(bg(), record)
		k.RenewNow()
		if n := tp.rdb.Exists(bg(), record).Val(); n != 0 {
			t.Fatal("a heartbeat recreated a deleted record")
		}
	})
}
