package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/localserver"
)

// Replicated is a master with two replicas (--replicaof) and three sentinels (quorum 2) watching it
// as "mymaster", with short timeouts so a dead master is replaced in a few seconds. Every process is
// local, on a loopback port, and stopped when the package's tests end.
//
// With Proxied, the replicas replicate and the sentinels watch the first master through two
// addresses a test gives (fault proxies in front of it): cutting those isolates the master from its
// replicas and sentinels while clients that reach its own address still write to it, the minority
// master of a partition.
type Replicated struct {
	Nodes     []*Server // Nodes[0] is the first master
	Sentinels []*Sentinel
	// Aliases maps other addresses of a node (the proxies of a ReplicaLink) to its own.
	Aliases map[string]string
}

// SentinelAddrs are the sentinels' addresses.
func (r *Replicated) SentinelAddrs() []string {
	out := make([]string, len(r.Sentinels))
	for i, s := range r.Sentinels {
		out[i] = s.Addr
	}
	return out
}

// URL is a redis:// URL for REDIS_MODE=sentinel naming every sentinel.
func (r *Replicated) URL() string { return redisURL(r.SentinelAddrs(), "master_name=mymaster") }

// ReplicaLink says where replicas and sentinels reach the first master: addresses of proxies to
// it, or "" for its own address.
type ReplicaLink struct {
	// ReplicaOf gives, from the master's address, the address replicas replicate from.
	ReplicaOf func(master string) (string, error)
	// Watch gives, from the master's address, the address sentinels watch.
	Watch func(master string) (string, error)
}

// StartReplicated starts the topology; link may be zero (everything direct).
func StartReplicated(link ReplicaLink) (*Replicated, error) {
	r := &Replicated{Aliases: map[string]string{}}
	fail := func(err error) (*Replicated, error) {
		r.Stop()
		return nil, fmt.Errorf("redistest: replicated: %w", err)
	}
	m, err := start()
	if err != nil {
		return fail(err)
	}
	r.Nodes = append(r.Nodes, m)
	from, watch := m.Addr, m.Addr
	if link.ReplicaOf != nil {
		if from, err = link.ReplicaOf(m.Addr); err != nil {
			return fail(err)
		}
	}
	if link.Watch != nil {
		if watch, err = link.Watch(m.Addr); err != nil {
			return fail(err)
		}
	}
	r.Aliases[from], r.Aliases[watch] = m.Addr, m.Addr
	host, port, _ := net.SplitHostPort(from)
	for i := 0; i < 2; i++ {
		s, err := start("--replicaof", host, port)
		if err != nil {
			return fail(err)
		}
		r.Nodes = append(r.Nodes, s)
	}
	for _, s := range r.Nodes[1:] {
		if err := waitRole(s.Addr, "slave", "master_link_status:up", 20*time.Second); err != nil {
			return fail(err)
		}
	}
	for i := 0; i < 3; i++ {
		s, err := startSentinel(watch)
		if err != nil {
			return fail(err)
		}
		r.Sentinels = append(r.Sentinels, s)
		onExit(s.stop)
	}
	// Every sentinel knows both replicas and the other sentinels before a test kills anything.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range r.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
		for {
			m, err := c.Master(ctx, "mymaster").Result()
			if err == nil && m["num-slaves"] == "2" && m["num-other-sentinels"] == "2" {
				break
			}
			if ctx.Err() != nil {
				c.Close()
				return fail(fmt.Errorf("sentinel %s not ready: %v %v", s.Addr, err, m))
			}
			time.Sleep(100 * time.Millisecond)
		}
		c.Close()
	}
	onExit(r.Stop)
	return r, nil
}

// Stop kills every process of the topology.
func (r *Replicated) Stop() {
	for _, s := range r.Sentinels {
		s.stop()
	}
	for _, n := range r.Nodes {
		n.Stop()
	}
}

// MasterAddr is the master's address as the sentinels report it (SENTINEL get-master-addr-by-name)
// from the first sentinel that answers.
func (r *Replicated) MasterAddr(ctx context.Context) (string, error) {
	var last error
	for _, s := range r.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
		a, err := c.GetMasterAddrByName(ctx, "mymaster").Result()
		c.Close()
		if err == nil && len(a) == 2 {
			return net.JoinHostPort(a[0], a[1]), nil
		}
		last = err
	}
	return "", fmt.Errorf("redistest: no sentinel names the master: %v", last)
}

// Node is the server of the topology listening on addr (nil when none is).
func (r *Replicated) Node(addr string) *Server {
	if a, ok := r.Aliases[addr]; ok {
		addr = a
	}
	for _, n := range r.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// KillMaster kills the current master (SIGKILL) and returns it and when it died.
func (r *Replicated) KillMaster(ctx context.Context) (*Server, time.Time, error) {
	a, err := r.MasterAddr(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	m := r.Node(a)
	if m == nil {
		return nil, time.Time{}, fmt.Errorf("redistest: the sentinels' master %s is none of the nodes", a)
	}
	m.Kill()
	return m, time.Now(), nil
}

// WaitPromotion waits until a quorum's view names a master other than old that answers as master.
func (r *Replicated) WaitPromotion(ctx context.Context, old *Server) (*Server, error) {
	for {
		if a, err := r.MasterAddr(ctx); err == nil {
			if n := r.Node(a); n != nil && n != old && waitRole(n.Addr, "master", "", 200*time.Millisecond) == nil {
				return n, nil
			}
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("redistest: no replica promoted in place of %s: %w", old.Addr, ctx.Err())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Rejoin restarts a killed old master with no data and as a master, as its configuration file
// says once a sentinel promoted it (CONFIG REWRITE): a node started as a replica forgets its
// --replicaof. The sentinels turn it into a replica of the new master, and Rejoin waits until its
// link to the master is up.
func (r *Replicated) Rejoin(old *Server, within time.Duration) error {
	for i, a := range old.args {
		if a == "--replicaof" && i+2 < len(old.args) {
			old.args = append(old.args[:i:i], old.args[i+3:]...)
			break
		}
	}
	if err := old.Restart(); err != nil {
		return err
	}
	return waitRole(old.Addr, "slave", "master_link_status:up", within)
}

// WaitReplica waits until the server at addr is a replica with its link to a master up.
func WaitReplica(addr string, within time.Duration) error {
	return waitRole(addr, "slave", "master_link_status:up", within)
}

// waitRole waits until INFO replication on addr says role (and has want, if given).
func waitRole(addr, role, want string, within time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(within)
	var info string
	var err error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		info, err = c.Info(ctx, "replication").Result()
		cancel()
		if err == nil && strings.Contains(info, "role:"+role) && (want == "" || strings.Contains(info, want)) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: %s not %s %s within %s: %v %q", addr, role, want, within, err, info)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func startSentinel(watch string) (*Sentinel, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	dir, port, err := localserver.Site("redistest-sentinel-")
	if err != nil {
		return nil, err
	}
	host, mport, _ := net.SplitHostPort(watch)
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\n"+
		"sentinel monitor mymaster %s %s 2\n"+
		"sentinel down-after-milliseconds mymaster 1000\n"+
		"sentinel failover-timeout mymaster 3000\n"+
		"sentinel parallel-syncs mymaster 2\n",
		port, dir, filepath.Join(dir, "sentinel.log"), host, mport)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, conf, "--sentinel")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Sentinel{Addr: "127.0.0.1:" + strconv.Itoa(port), cmd: cmd, dir: dir}
	if err := waitReady(s.Addr, 10*time.Second); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

func (s *Sentinel) stop() {
	if s.cmd != nil && s.cmd.ProcessState == nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
	if s.dir != "" && strings.Contains(s.dir, "redistest-sentinel-") {
		_ = os.RemoveAll(s.dir)
	}
}

// ReplicatedCluster is a local Redis Cluster of three masters with one replica each, with a
// cluster-node-timeout of 1 s so a dead master's replica takes over in a few seconds.
type ReplicatedCluster struct {
	Nodes []*Server // masters first, then replicas (Nodes[i+3] replicates Nodes[i])
}

// URL is a redis:// cluster URL (REDIS_MODE=cluster) naming every node.
func (c *ReplicatedCluster) URL() string { return redisURL(c.Addrs()) }

// Addrs lists every node's address.
func (c *ReplicatedCluster) Addrs() []string { return addrsOf(c.Nodes) }

// StartReplicatedCluster starts the cluster; it is stopped when the package's tests end.
func StartReplicatedCluster() (*ReplicatedCluster, error) {
	const masters = 3
	cl := &ReplicatedCluster{}
	fail := func(err error) (*ReplicatedCluster, error) {
		for _, n := range cl.Nodes {
			n.Stop()
		}
		return nil, fmt.Errorf("redistest: replicated cluster: %w", err)
	}
	nodes, bus, err := clusterNodes(2*masters, "1000", "--cluster-replica-validity-factor", "0")
	cl.Nodes = nodes
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	clients := clientsOf(cl.Nodes)
	defer closeAll(clients)
	if err := formCluster(ctx, clients, cl.Nodes, bus, masters); err != nil {
		return fail(err)
	}
	for i := 0; i < masters; i++ {
		id, err := clients[i].Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			return fail(err)
		}
		for {
			// The replica must have heard of its master through the bus before it can follow it.
			err = clients[i+masters].Do(ctx, "CLUSTER", "REPLICATE", id).Err()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return fail(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for i, c := range clients {
		for {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:6") &&
				(i < masters || waitRole(cl.Nodes[i].Addr, "slave", "master_link_status:up", 100*time.Millisecond) == nil) {
				break
			}
			if ctx.Err() != nil {
				return fail(fmt.Errorf("not ok within 60s: %v %q", err, info))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	onExit(func() {
		for _, n := range cl.Nodes {
			n.Stop()
		}
	})
	return cl, nil
}

// Masters lists the nodes that answer as masters now.
func (c *ReplicatedCluster) Masters() []*Server {
	var out []*Server
	for _, n := range c.Nodes {
		if waitRole(n.Addr, "master", "", 100*time.Millisecond) == nil {
			out = append(out, n)
		}
	}
	return out
}

// KillMaster kills (SIGKILL) the first node that answers as a master and returns it and when it
// died.
func (c *ReplicatedCluster) KillMaster() (*Server, time.Time, error) {
	ms := c.Masters()
	if len(ms) == 0 {
		return nil, time.Time{}, errors.New("redistest: no master answers")
	}
	ms[0].Kill()
	return ms[0], time.Now(), nil
}

// WaitPromotion waits until the cluster covers every slot again with three live masters, none of
// them old.
func (c *ReplicatedCluster) WaitPromotion(old *Server, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		ok := 0
		for _, n := range c.Nodes {
			if n == old {
				continue
			}
			cc := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			info, err := cc.ClusterInfo(ctx).Result()
			role, _ := cc.Info(ctx, "replication").Result()
			cancel()
			cc.Close()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(role, "role:master") {
				ok++
			}
		}
		if ok == 3 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: no replica took over from %s within %s", old.Addr, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Rejoin restarts a killed node with its nodes.conf (and no data): it rejoins as a replica of the
// node that took its slots; Rejoin waits until it replicates.
func (c *ReplicatedCluster) Rejoin(old *Server, within time.Duration) error {
	if err := old.Restart(); err != nil {
		return err
	}
	return waitRole(old.Addr, "slave", "master_link_status:up", within)
}

// SentinelLogs is the end of every sentinel's log, for a test that wants to show why a failover
// took long.
func (r *Replicated) SentinelLogs() string {
	var b strings.Builder
	for _, s := range r.Sentinels {
		log, _ := os.ReadFile(filepath.Join(s.dir, "sentinel.log"))
		if len(log) > 3000 {
			log = log[len(log)-3000:]
		}
		fmt.Fprintf(&b, "--- sentinel %s\n%s\n", s.Addr, log)
	}
	return b.String()
}

// StallMaster pauses the current master (SIGSTOP, clients' commands wait in its socket buffers)
// until a replica is promoted, then resumes it: it runs what was queued and answers as a master
// until the sentinels demote it. It returns the old master and how long the promotion took.
func (r *Replicated) StallMaster(ctx context.Context) (*Server, time.Duration, error) {
	a, err := r.MasterAddr(ctx)
	if err != nil {
		return nil, 0, err
	}
	m := r.Node(a)
	if m == nil {
		return nil, 0, fmt.Errorf("redistest: the sentinels' master %s is none of the nodes", a)
	}
	at := time.Now()
	if err := m.Pause(); err != nil {
		return nil, 0, err
	}
	_, err = r.WaitPromotion(ctx, m)
	d := time.Since(at)
	if rerr := m.Resume(); err == nil {
		err = rerr
	}
	return m, d, err
}

// ReplicaAddrs is what each sentinel lists as mymaster's replicas (SENTINEL REPLICAS), by
// sentinel address.
func (r *Replicated) ReplicaAddrs(ctx context.Context) map[string][]string {
	out := map[string][]string{}
	for _, s := range r.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
		reps, err := c.Replicas(ctx, "mymaster").Result()
		c.Close()
		if err != nil {
			out[s.Addr] = []string{"error: " + err.Error()}
			continue
		}
		for _, rep := range reps {
			out[s.Addr] = append(out[s.Addr], rep["name"]+" ("+rep["flags"]+")")
		}
	}
	return out
}

// Reset makes each sentinel in turn forget mymaster's replicas and sentinels (SENTINEL RESET)
// and learn them again from the master, waiting until it knows want replicas and the two other
// sentinels: a node a sentinel knew under another address (a proxy) is then known once.
func (r *Replicated) Reset(ctx context.Context, want int) error {
	for _, s := range r.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
		err := c.Reset(ctx, "mymaster").Err()
		for err == nil {
			m, merr := c.Master(ctx, "mymaster").Result()
			if merr == nil && m["num-slaves"] == strconv.Itoa(want) && m["num-other-sentinels"] == "2" {
				break
			}
			if ctx.Err() != nil {
				err = fmt.Errorf("sentinel %s after reset: %v %v", s.Addr, merr, m)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		c.Close()
		if err != nil {
			return fmt.Errorf("redistest: reset: %w", err)
		}
	}
	return nil
}

// StallMaster pauses (SIGSTOP) the first node that answers as a master until its replica took
// over, then resumes it; it returns the old master and how long the promotion took.
func (c *ReplicatedCluster) StallMaster(within time.Duration) (*Server, time.Duration, error) {
	ms := c.Masters()
	if len(ms) == 0 {
		return nil, 0, errors.New("redistest: no master answers")
	}
	at := time.Now()
	if err := ms[0].Pause(); err != nil {
		return nil, 0, err
	}
	err := c.WaitPromotion(ms[0], within)
	d := time.Since(at)
	if rerr := ms[0].Resume(); err == nil {
		err = rerr
	}
	return ms[0], d, err
}

// SentinelEvents is every event line (+switch-master, +convert-to-slave, ...) of every sentinel's
// log, for a test that wants to show a failover's steps.
func (r *Replicated) SentinelEvents() string {
	var b strings.Builder
	for _, s := range r.Sentinels {
		log, _ := os.ReadFile(filepath.Join(s.dir, "sentinel.log"))
		fmt.Fprintf(&b, "--- sentinel %s\n", s.Addr)
		for _, line := range strings.Split(string(log), "\n") {
			if strings.Contains(line, "# +") || strings.Contains(line, "# -") || strings.Contains(line, "* +") || strings.Contains(line, "* -") {
				b.WriteString(line + "\n")
			}
		}
	}
	return b.String()
}
