package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { Main(m) }

// A killed master's replica is promoted, keeps the replicated data, and the old master comes back
// as a replica of it.
func TestReplicatedFailover(t *testing.T) {
	t.Parallel()
	r, err := StartReplicated(ReplicaLink{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: r.SentinelAddrs()})
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "WAIT", 2, 1000).Err(); err != nil {
		t.Fatal(err)
	}
	old, at, err := r.KillMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.WaitPromotion(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("promoted %s in %s", m.Addr, time.Since(at))
	if v := m.Client(t, 0).Get(ctx, "k").Val(); v != "v" {
		t.Fatalf("the promoted replica has k=%q, want v", v)
	}
	if err := r.Rejoin(old, 20*time.Second); err != nil {
		t.Fatal(err)
	}
}

// A killed cluster master's replica takes its slots; the old master rejoins as a replica.
func TestReplicatedClusterFailover(t *testing.T) {
	t.Parallel()
	cl, err := StartReplicatedCluster()
	if err != nil {
		t.Fatal(err)
	}
	old, at, err := cl.KillMaster()
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitPromotion(old, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("promoted in %s", time.Since(at))
	if err := cl.Rejoin(old, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		if err := c.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatalf("set %s after the failover: %v", k, err)
		}
	}
}
