package chaos

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/faultproxy"
	"github.com/jobguard/jobguard/internal/redistest"
)

// TestSentinelAfterPartition is the failover suite's Sentinel topology without the load: a
// partition of the first master (the sentinels watch it and the replicas follow it through
// proxies), healed once a replica was promoted, then kills (-9) of the master, each restarted 5 s
// after its promotion. It prints, per kill, the promotion time and how long a FailoverClient
// (the app's settings) took to write again, the sentinels' replica lists and their logs: the
// evidence for the slow recoveries the suite saw after its partition. CHAOS=sentinel-alias (about
// a minute); CHAOS_NO_SENTINEL_RESET=1 leaves out the SENTINEL RESET that follows the heal.
func TestSentinelAfterPartition(t *testing.T) {
	if os.Getenv("CHAOS") != "sentinel-alias" {
		t.Skip("set CHAOS=sentinel-alias")
	}
	var pxR, pxS *faultproxy.Proxy
	rep, err := redistest.StartReplicated(redistest.ReplicaLink{
		ReplicaOf: func(m string) (string, error) { p, err := faultproxy.New(m); pxR = p; return addrOf(p), err },
		Watch:     func(m string) (string, error) { p, err := faultproxy.New(m); pxS = p; return addrOf(p), err },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer pxR.Close()
	defer pxS.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: rep.SentinelAddrs(),
		MaxRetries: 1, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second, ContextTimeoutEnabled: true})
	defer c.Close()
	writable := func(since time.Time) time.Duration {
		for i := 0; ; i++ {
			cctx, ccancel := context.WithTimeout(ctx, time.Second)
			err := c.Set(cctx, "probe", i, 0).Err()
			ccancel()
			if err == nil {
				return time.Since(since)
			}
			if ctx.Err() != nil {
				return -1
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	old := rep.Nodes[0]
	at := time.Now()
	pxR.Block()
	pxS.Block()
	if _, err := rep.WaitPromotion(ctx, old); err != nil {
		t.Fatal(err)
	}
	t.Logf("partition: promotion after %s, writable after %s", time.Since(at).Round(time.Millisecond), writable(at).Round(time.Millisecond))
	time.Sleep(4 * time.Second)
	pxR.Unblock()
	pxS.Unblock()
	if err := redistest.WaitReplica(old.Addr, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("healed; replicas: %v", rep.ReplicaAddrs(ctx))
	if os.Getenv("CHAOS_NO_SENTINEL_RESET") == "" {
		if err := rep.Reset(ctx, 2); err != nil {
			t.Fatal(err)
		}
		t.Logf("after SENTINEL RESET: %v", rep.ReplicaAddrs(ctx))
	}
	time.Sleep(5 * time.Second)
	slow := false
	for i := 0; i < 4; i++ {
		m, at, err := rep.KillMaster(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p, err := rep.WaitPromotion(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		promoted := time.Since(at)
		w := writable(at)
		slow = slow || w > 10*time.Second
		addr, _ := rep.MasterAddr(ctx)
		t.Logf("kill %d of %s: promoted %s (sentinels name %s) after %s, writable after %s; replicas %v", i+1, m.Addr, p.Addr, addr,
			promoted.Round(time.Millisecond), w.Round(time.Millisecond), rep.ReplicaAddrs(ctx))
		time.Sleep(rejoinAfter)
		if err := rep.Rejoin(m, 60*time.Second); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
	}
	fmt.Printf("proxies: replication %s, sentinels %s -> %s\n", pxR.Addr(), pxS.Addr(), old.Addr)
	if slow || os.Getenv("CHAOS_SENTINEL_LOGS") != "" {
		fmt.Println(rep.SentinelEvents())
	}
}
