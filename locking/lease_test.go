package locking

import (
	"context"
	"errors"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
)

func TestScriptsLoad(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp topology) {
		entries, err := scriptFS.ReadDir("scripts")
		if err != nil || len(entries) == 0 {
			t.Fatalf("no scripts: %v", err)
		}
		for _, e := range entries {
			src := mustScript(e.Name())
			if !strings.HasPrefix(src, "-- "+strings.TrimSuffix(e.Name(), ".lua")) ||
				!strings.Contains(src, "KEYS[1]") || !strings.Contains(src, "returns") {
				t.Errorf("%s lacks its KEYS/ARGV/returns header", e.Name())
			}
		}
		for name, s := range map[string]*redis.Script{
			"acquire": acquireScript, "renew": renewScript, "release": releaseScript, "inspect": inspectScript,
			"fenced_hset": fencedHSet.script, "fenced_set": fencedSet.script,
		} {
			if err := s.Load(bg(), tp.rdb).Err(); err != nil {
				t.Errorf("%s does not load: %v", name, err)
			}
		}
	})
}

func TestKeysOfOneResourceShareASlot(t *testing.T) {
	t.Parallel()
	cl := redistest.NewCluster(t)
	c := New(cl.Client, WithPrefix("jobguard"))
	for _, resource := range []string{"tenant-a:res-1", "job:01HZX", "a.b_c-d"} {
		keys := []string{c.LeaseKey(resource), c.FenceKey(resource), c.Key(resource, "job:1"), FenceRecordKey(c.Key(resource, "cache"))}
		var first int64
		for i, k := range keys {
			slot, err := cl.Client.ClusterKeySlot(bg(), k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				first = slot
			} else if slot != first {
				t.Fatalf("%s is in slot %d, %s in %d", keys[0], first, k, slot)
			}
		}
	}
}

func TestValidateResource(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"", "a{b", "a}b", "a\nb", strings.Repeat("x", 513)} {
		if err := ValidateResource(bad); !errors.Is(err, ErrInvalidResource) {
			t.Errorf("%q accepted", bad)
		}
	}
	db := redistest.NewDB(t)
	if _, err := New(db.Client).TryAcquire(bg(), "x{y}", time.Second); !errors.Is(err, ErrInvalidResource) {
		t.Fatalf("TryAcquire with a brace: %v", err)
	}
	if n, _ := db.Client.DBSize(bg()).Result(); n != 0 {
		t.Fatalf("a rejected resource left %d keys", n)
	}
}

func TestExclusiveAndTokensIncrease(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp topology) {
		c := tp.client(WithOwnerPrefix("worker-1"))
		a, err := c.TryAcquire(bg(), "r", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(a.Owner, "worker-1:") || a.Token != 1 || a.ValidFor() <= 4*time.Second {
			t.Fatalf("lease %+v, valid for %s", a, a.ValidFor())
		}
		_, err = c.TryAcquire(bg(), "r", 5*time.Second)
		var held *HeldError
		if !errors.As(err, &held) || !errors.Is(err, ErrNotAcquired) || held.Remaining <= 0 || held.Remaining > 5*time.Second {
			t.Fatalf("second acquire: %v", err)
		}
		info, err := c.Inspect(bg(), "r")
		if err != nil || info.Owner != a.Owner || info.Fence != 1 || info.Remaining <= 0 {
			t.Fatalf("inspect %+v %v", info, err)
		}
		if err := a.Release(bg()); err != nil {
			t.Fatal(err)
		}
		if !a.Expired() {
			t.Fatal("a released lease is still trusted")
		}
		b, err := c.TryAcquire(bg(), "r", 5*time.Second)
		if err != nil || b.Token != 2 || b.Owner == a.Owner {
			t.Fatalf("after release: %+v %v", b, err)
		}
		if info, _ := c.Inspect(bg(), "free"); info != (LeaseInfo{}) {
			t.Fatalf("a never-used resource: %+v", info)
		}
	})
}

func TestStaleOwnerCannotRenewOrRelease(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp topology) {
		c := tp.client()
		a, err := c.TryAcquire(bg(), "r", 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		// A holder that stops renewing loses the lease within its TTL.
		var b *Lease
		eventually(t, time.Second, "the lease frees up after its TTL", func() bool {
			b, err = c.TryAcquire(bg(), "r", 5*time.Second)
			return err == nil
		})
		if !a.Expired() {
			t.Fatal("the lapsed lease is still trusted locally")
		}
		if err := a.Renew(bg()); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("stale renew: %v", err)
		}
		if err := a.Release(bg()); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("stale release: %v", err)
		}
		info, _ := c.Inspect(bg(), "r")
		if info.Owner != b.Owner || info.Remaining < 4*time.Second {
			t.Fatalf("the stale owner touched the new lease: %+v", info)
		}
		if err := b.Renew(bg()); err != nil {
			t.Fatalf("the owner's renew: %v", err)
		}
	})
}

func TestAcquireWaits(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp topology) {
		c := tp.client()
		a, _ := c.TryAcquire(bg(), "r", 5*time.Second)
		go func() { time.Sleep(100 * time.Millisecond); _ = a.Release(bg()) }()
		b, err := c.Acquire(bg(), "r", time.Second)
		if err != nil || b.Token != a.Token+1 {
			t.Fatalf("waiting acquire: %+v %v", b, err)
		}
		ctx, cancel := context.WithCancelCause(bg())
		cancel(errors.New("caller gave up"))
		if _, err := c.Acquire(ctx, "r", time.Second); err == nil || !strings.Contains(err.Error(), "caller gave up") {
			t.Fatalf("acquire on a held resource with a cancelled context: %v", err)
		}
	})
}

func TestFenceTTLIsOptIn(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp topology) {
		c := tp.client()
		l, _ := c.TryAcquire(bg(), "long-lived", time.Second)
		_ = l.Release(bg())
		if ttl := tp.rdb.PTTL(bg(), c.FenceKey("long-lived")).Val(); ttl != -1 {
			t.Fatalf("a long-lived fence counter has TTL %s", ttl)
		}
		l, _ = c.TryAcquire(bg(), "per-job", time.Second, WithFenceTTL(time.Hour))
		_ = l.Release(bg())
		if ttl := tp.rdb.PTTL(bg(), c.FenceKey("per-job")).Val(); ttl <= 59*time.Minute {
			t.Fatalf("per-job fence counter TTL %s", ttl)
		}
	})
}

// dropFirstReply is a loopback proxy in front of Redis that forwards the first EVALSHA it sees but
// closes the connection instead of relaying Redis's answer: the command ran, the client saw an
// error, and go-redis retries it.
func dropFirstReply(t *testing.T, target string) (addr string, dropped *atomic.Int32) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	dropped = &atomic.Int32{}
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			// The client's bytes are read first and the drop decided before they reach Redis, so that
			// Redis's answer can never be relayed ahead of the decision.
			var drop atomic.Bool
			go func() {
				buf := make([]byte, 64<<10)
				var seen []byte // what the client sent: a command may arrive split over two reads
				for {
					n, err := client.Read(buf)
					if err != nil {
						client.Close()
						server.Close()
						return
					}
					seen = append(seen, buf[:n]...)
					first := strings.Contains(strings.ToLower(string(seen)), "evalsha") && dropped.CompareAndSwap(0, 1)
					if first {
						drop.Store(true)
					}
					_, _ = server.Write(buf[:n])
					if first {
						time.Sleep(50 * time.Millisecond) // let Redis run it
						client.Close()
						server.Close()
						return
					}
				}
			}()
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := server.Read(buf)
					if err != nil || drop.Load() {
						return
					}
					if _, err := client.Write(buf[:n]); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), dropped
}

func TestRetriedAcquireDrawsOneToken(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	// Load the script first so the proxied call is an EVALSHA that runs.
	if err := acquireScript.Load(bg(), db.Client).Err(); err != nil {
		t.Fatal(err)
	}
	addr, dropped := dropFirstReply(t, db.Server.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: addr, DB: db.N, MaxRetries: 3, Protocol: 2})
	defer rdb.Close()
	c := New(rdb)
	l, err := c.TryAcquire(bg(), "r", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if dropped.Load() != 1 {
		t.Fatal("the proxy dropped no reply; the test proves nothing")
	}
	fence, _ := db.Client.Get(bg(), c.FenceKey("r")).Int64()
	if l.Token != 1 || fence != 1 {
		t.Fatalf("retried acquire: token %d, fence counter %d; want 1 and 1", l.Token, fence)
	}
}

// A checker records every grant; sorted by token, each holder's trusted interval must end before
// the next one's begins: tokens increase in grant order and no two holders trust the lease at once.
// A grant whose answer arrived after its validity (ValidFor 0) was never trusted and is not compared:
// counting it as trusted from its arrival made the test fail on a loaded machine (a CI run, and 2
// of 30 runs beside two busy loops) where the locks were right.
func TestContention(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp topology) {
		c := tp.client(WithSafetyMargin(0.05, 5*time.Millisecond))
		type grant struct {
			token      int64
			start, end time.Time
			// trusted: the lease was still valid when its acquire returned. One whose answer came
			// back after its validity (a loaded machine delays the goroutine) was never trusted,
			// and its holder must not act on it (Lease.ValidFor is 0).
			trusted bool
		}
		const workers, resources, perWorker = 16, 4, 30
		var mu sync.Mutex
		grants := map[string][]grant{}
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				stopAt := time.Now().Add(2 * time.Second)
				for i := 0; i < perWorker && time.Now().Before(stopAt); {
					res := string(rune('a' + (w+i)%resources))
					l, err := c.TryAcquire(bg(), res, 20*time.Millisecond)
					if err != nil {
						if !errors.Is(err, ErrNotAcquired) {
							t.Error(err)
						}
						time.Sleep(time.Millisecond)
						continue
					}
					i++
					start := time.Now()
					valid := l.ValidFor()
					end := start.Add(valid)
					time.Sleep(time.Duration(i%3) * time.Millisecond)
					if i%5 != 0 { // every fifth lease is abandoned and must lapse
						releaseAt := time.Now()
						if releaseAt.Before(end) {
							end = releaseAt
						}
						_ = l.Release(bg())
					}
					mu.Lock()
					grants[res] = append(grants[res], grant{l.Token, start, end, valid > 0})
					mu.Unlock()
				}
			}(w)
		}
		wg.Wait()
		total := 0
		for res, gs := range grants {
			sort.Slice(gs, func(i, j int) bool { return gs[i].token < gs[j].token })
			var last *grant // the trusted grant with the latest end among the lower tokens
			for i := range gs {
				if i > 0 && gs[i].token <= gs[i-1].token {
					t.Fatalf("%s: token %d granted twice", res, gs[i].token)
				}
				if !gs[i].trusted {
					continue
				}
				if last != nil && gs[i].start.Before(last.end) {
					t.Fatalf("%s: token %d trusted from %s while token %d trusted until %s",
						res, gs[i].token, gs[i].start.Format("15:04:05.000000"), last.token, last.end.Format("15:04:05.000000"))
				}
				if last == nil || gs[i].end.After(last.end) {
					last = &gs[i]
				}
			}
			total += len(gs)
		}
		t.Logf("%d grants over %d resources", total, resources)
		if total < resources*20 {
			t.Fatalf("only %d grants: the test exercised too little", total)
		}
	})
}
