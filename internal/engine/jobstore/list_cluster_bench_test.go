package jobstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/locking"
)

// BenchmarkClusterListPage pages through the index of all jobs of 10,000 jobs on a cluster of
// three masters (48 stripes), 50 jobs a page, and prints per page the script calls and the
// commands they ran (INFO commandstats over the masters), the masters' CPU and the wall time.
func BenchmarkClusterListPage(b *testing.B) {
	db := redistest.NewCluster(b)
	s := New(db.Client, locking.New(db.Client, locking.WithPrefix(db.Prefix)), Config{WorkerID: "w"})
	ctx := context.Background()
	ids := indexClusterJobs(b, s, 10000)
	for b.Loop() {
		before := clusterCommandStats(b, db.Client)
		start := time.Now()
		pages, listed := 0, 0
		for cursor := ""; ; pages++ {
			p, err := s.List(ctx, ListQuery{Cursor: cursor, Limit: 50})
			if err != nil {
				b.Fatal(err)
			}
			listed += len(p.Jobs)
			if cursor = p.Next; cursor == "" {
				pages++
				break
			}
		}
		elapsed := time.Since(start)
		after := clusterCommandStats(b, db.Client)
		if listed != len(ids) {
			b.Fatalf("listed %d jobs, want %d", listed, len(ids))
		}
		per := func(k string) float64 { return float64(after[k]-before[k]) / float64(pages) }
		fmt.Printf("list of %d jobs on 3 masters, %d stripes: %d pages of 50; per page: %.1f script calls, %.1f ZREVRANGEBYSCORE,"+
			" %.1f HMGET, %.0f µs of Redis CPU (all masters), %.0f µs wall\n", len(ids), s.Stripes(), pages, per("evalsha")+per("eval"),
			per("zrevrangebyscore"), per("hmget"), per("cpu_us"), float64(elapsed.Microseconds())/float64(pages))
	}
}

// indexClusterJobs writes n jobs' records and index entries, a millisecond apart, in pipelines.
func indexClusterJobs(tb testing.TB, s *Store, n int) []string {
	tb.Helper()
	ctx := context.Background()
	base := time.Now().Add(-time.Hour)
	var ids []string
	for from := 0; from < n; from += 500 {
		pipe := s.rdb.Pipeline()
		for i := from; i < min(n, from+500); i++ {
			at := base.Add(time.Duration(i) * time.Millisecond)
			id := NewJobID(fmt.Sprint("res-", i), at)
			ids = append(ids, id)
			k, _ := s.Keys(id, "")
			pipe.HSet(ctx, k.Record, FieldJobID, id, FieldType, "typ", FieldQueue, "default", FieldStatus, string(StatusQueued),
				FieldAttempt, 1, FieldCreatedAt, at.UnixMilli(), FieldUpdatedAt, at.UnixMilli())
			pipe.PExpire(ctx, k.Record, s.cfg.Retention)
			s.QueueIndex(ctx, pipe, "", id, nil, at)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			tb.Fatal(err)
		}
	}
	return ids
}

// clusterCommandStats sums over the masters each command's calls (lower case, "cpu_us" the
// masters' used CPU in µs).
func clusterCommandStats(tb testing.TB, c *redis.ClusterClient) map[string]int64 {
	tb.Helper()
	out := map[string]int64{}
	ctx := context.Background()
	err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		info, err := m.Info(ctx, "commandstats", "cpu").Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(info, "\r\n") {
			name, rest, ok := strings.Cut(line, ":")
			switch {
			case !ok:
			case strings.HasPrefix(name, "cmdstat_"):
				calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
				n, _ := strconv.ParseInt(calls, 10, 64)
				out[strings.TrimPrefix(name, "cmdstat_")] += n
			case name == "used_cpu_sys" || name == "used_cpu_user":
				f, _ := strconv.ParseFloat(rest, 64)
				out["cpu_us"] += int64(f * 1e6)
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}
