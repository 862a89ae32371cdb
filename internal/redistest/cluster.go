package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a local Redis Cluster of masters (no replicas) covering all 16384 slots, split in
// equal contiguous ranges (as redis-cli --cluster create splits them).
type Cluster struct {
	Nodes []*Server
}

var nextPrefix atomic.Int64

// Addrs lists the masters' addresses.
func (c *Cluster) Addrs() []string { return addrsOf(c.Nodes) }

// URL is a redis:// cluster URL (for REDIS_MODE=cluster) naming every master.
func (c *Cluster) URL() string { return redisURL(c.Addrs()) }

// ClusterDB is one test's share of the package's cluster: a client and a key prefix of its own.
type ClusterDB struct {
	Cluster *Cluster
	Client  *redis.ClusterClient
	// Prefix is unique to the test; keys under it are deleted when the test ends.
	Prefix string
}

// NewCluster gives the test the package's 3-master cluster (started on first use) with a client
// and a key prefix of its own.
func NewCluster(tb testing.TB) ClusterDB {
	tb.Helper()
	clusterOnce.Do(func() {
		cluster, clusterErr = StartCluster(3)
		if clusterErr == nil {
			onExit(func() {
				for _, n := range cluster.Nodes {
					n.Stop()
				}
			})
		}
	})
	if clusterErr != nil {
		tb.Fatal(clusterErr)
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	prefix := fmt.Sprintf("t%d", nextPrefix.Add(1))
	tb.Cleanup(func() {
		ctx := context.Background()
		_ = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			iter := m.Scan(ctx, 0, prefix+":*", 1000).Iterator()
			for iter.Next(ctx) {
				m.Del(ctx, iter.Val())
			}
			return iter.Err()
		})
		_ = c.Close()
	})
	return ClusterDB{Cluster: cluster, Client: c, Prefix: prefix}
}

// StartCluster starts a cluster of masters masters; the caller stops its nodes (Stop).
func StartCluster(masters int) (*Cluster, error) {
	cl := &Cluster{}
	fail := func(err error) (*Cluster, error) {
		for _, n := range cl.Nodes {
			n.Stop()
		}
		return nil, fmt.Errorf("redistest: cluster: %w", err)
	}
	nodes, busPorts, err := clusterNodes(masters, "2000")
	cl.Nodes = nodes
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clients := clientsOf(cl.Nodes)
	defer closeAll(clients)
	if err := formCluster(ctx, clients, cl.Nodes, busPorts, masters); err != nil {
		return fail(err)
	}
	for _, c := range clients {
		for {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(masters)+"\r") {
				break
			}
			if ctx.Err() != nil {
				return fail(fmt.Errorf("not ok within 30s: %v %q", err, info))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return cl, nil
}

// Stop stops every node of the cluster.
func (c *Cluster) Stop() {
	for _, n := range c.Nodes {
		n.Stop()
	}
}

// clusterNodes starts n cluster-enabled servers, each with a bus port of its own, with a node
// timeout of nodeTimeout ms and the extra args; on an error, the nodes started so far come back
// with it, for the caller to stop.
func clusterNodes(n int, nodeTimeout string, extra ...string) ([]*Server, []int, error) {
	var nodes []*Server
	bus := make([]int, n)
	for i := range bus {
		p, err := FreePort()
		if err != nil {
			return nodes, nil, err
		}
		bus[i] = p
		args := append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", nodeTimeout, "--cluster-port", strconv.Itoa(p),
			"--cluster-require-full-coverage", "yes"}, extra...)
		node, err := start(args...)
		if err != nil {
			return nodes, nil, err
		}
		nodes = append(nodes, node)
	}
	return nodes, bus, nil
}

// clientsOf is a client per node, in order.
func clientsOf(nodes []*Server) []*redis.Client {
	clients := make([]*redis.Client, len(nodes))
	for i, n := range nodes {
		clients[i] = redis.NewClient(&redis.Options{Addr: n.Addr})
	}
	return clients
}

func closeAll(clients []*redis.Client) {
	for _, c := range clients {
		_ = c.Close()
	}
}

// formCluster gives the first masters nodes equal ranges of the 16384 slots, and has the first
// node meet every other on its bus port (bus[i] is nodes[i]'s).
func formCluster(ctx context.Context, clients []*redis.Client, nodes []*Server, bus []int, masters int) error {
	per := 16384 / masters
	for i := 0; i < masters; i++ {
		lo, hi := i*per, (i+1)*per-1
		if i == masters-1 {
			hi = 16383
		}
		if err := clients[i].Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return err
		}
	}
	for i := 1; i < len(nodes); i++ {
		if err := clients[0].Do(ctx, "CLUSTER", "MEET", "127.0.0.1", nodes[i].Port, bus[i]).Err(); err != nil {
			return err
		}
	}
	return nil
}
