package locking

import (
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
)

// BenchmarkLeaseVsRedsync runs acquire+release cycles of a jobguard lease (which also draws a
// fencing token) and of a redsync Mutex (Lock+Unlock, no fencing) on the same Redis, in alternating
// chunks of 100 so that both sides see the same machine noise, and reports both rates and their
// ratio, and the Redis round trips one jobguard cycle costs.
func BenchmarkLeaseVsRedsync(b *testing.B) {
	db := redistest.NewDB(b)
	counter := &countPipelines{}
	ourRDB := redis.NewClient(&redis.Options{Addr: db.Server.Addr, DB: db.N})
	ourRDB.AddHook(counter)
	defer ourRDB.Close()
	c := New(ourRDB, WithPrefix("bench"))
	rs := redsync.New(goredis.NewPool(db.Client))
	mutex := rs.NewMutex("bench:redsync", redsync.WithExpiry(10*time.Second), redsync.WithTries(1))

	ours := func() error {
		l, err := c.TryAcquire(bg(), "bench", 10*time.Second)
		if err != nil {
			return err
		}
		return l.Release(bg())
	}
	theirs := func() error {
		if err := mutex.Lock(); err != nil {
			return err
		}
		_, err := mutex.Unlock()
		return err
	}
	var oursTime, theirsTime time.Duration
	chunk := func(cycle func() error, n int) time.Duration {
		start := time.Now()
		for i := 0; i < n; i++ {
			if err := cycle(); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	if err := ours(); err != nil { // loads the scripts: later cycles are EVALSHA only
		b.Fatal(err)
	}
	counter.n.Store(0)
	b.ResetTimer()
	for done := 0; done < b.N; done += 100 {
		n := min(100, b.N-done)
		oursTime += chunk(ours, n)
		theirsTime += chunk(theirs, n)
	}
	b.ReportMetric(float64(b.N)/oursTime.Seconds(), "jobguard-cycles/s")
	b.ReportMetric(float64(b.N)/theirsTime.Seconds(), "redsync-cycles/s")
	b.ReportMetric(theirsTime.Seconds()/oursTime.Seconds(), "ratio")
	b.ReportMetric(float64(counter.n.Load())/float64(b.N), "jobguard-round-trips/cycle")
}

// BenchmarkKeeperTick renews 1,000 held leases per iteration and reports the Redis round trips one
// tick costs.
func BenchmarkKeeperTick(b *testing.B) {
	db := redistest.NewDB(b)
	counter := &countPipelines{}
	rdb := redis.NewClient(&redis.Options{Addr: db.Server.Addr, DB: db.N})
	rdb.AddHook(counter)
	defer rdb.Close()
	c := New(rdb, WithPrefix("bench"))
	k := c.NewKeeper(WithTick(time.Hour))
	defer k.Close()
	const n = 1000
	for i := 0; i < n; i++ {
		l, err := c.TryAcquire(bg(), "r"+itoa(int64(i)), time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		_, stop := k.Keep(bg(), l)
		defer stop()
	}
	k.RenewNow()
	counter.n.Store(0)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k.RenewNow()
	}
	b.StopTimer()
	if k.Held() != n {
		b.Fatalf("%d leases lost", n-k.Held())
	}
	b.ReportMetric(float64(counter.n.Load())/float64(b.N), "round-trips/tick")
	b.ReportMetric(n, "leases")
}
