package jobstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/locking"
)

// indexJob writes a job's record and its index entry as an enqueue's confirmation does.
func indexJob(t testing.TB, s *Store, tenant, typ string, status Status, at time.Time) string {
	t.Helper()
	return indexTagged(t, s, tenant, typ, status, at, nil, "")
}

// indexTagged is indexJob with tags and a last error.
func indexTagged(t testing.TB, s *Store, tenant, typ string, status Status, at time.Time, tags []string, lastErr string) string {
	t.Helper()
	ctx := context.Background()
	id := NewJobID(fmt.Sprintf("r-%d-%s", at.UnixNano(), joinTags(tags)), at)
	k, _ := s.Keys(id, "")
	pipe := s.rdb.Pipeline()
	pipe.HSet(ctx, k.Record, FieldJobID, id, FieldType, typ, FieldQueue, "default", FieldTenant, tenant,
		FieldStatus, string(status), FieldAttempt, 1, FieldCreatedAt, at.UnixMilli(), FieldUpdatedAt, at.UnixMilli())
	if len(tags) > 0 {
		pipe.HSet(ctx, k.Record, FieldTags, joinTags(tags))
	}
	if lastErr != "" {
		pipe.HSet(ctx, k.Record, FieldLastError, lastErr)
	}
	pipe.PExpire(ctx, k.Record, s.cfg.Retention)
	s.QueueIndex(ctx, pipe, tenant, id, tags, at)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	return id
}

func listAll(t *testing.T, s *Store, q ListQuery) ([]string, int) {
	t.Helper()
	var ids []string
	pages := 0
	for {
		p, err := s.List(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, j := range p.Jobs {
			ids = append(ids, j.JobID)
		}
		if p.Next == "" {
			return ids, pages
		}
		q.Cursor = p.Next
	}
}

// Newest first, page by page, with no job twice or missed, including jobs of one millisecond; a
// filtered page continues with its cursor; another tenant sees nothing; an id whose record expired
// is skipped; the index has a TTL and drops entries older than the retention.
func TestListPagesNewestFirst(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour)
	type job struct {
		id string
		at time.Time
	}
	var jobs []job
	for i := range 11 {
		at := base.Add(time.Duration(i/3) * time.Millisecond) // three jobs per millisecond
		st := StatusDone
		if i%2 == 0 {
			st = StatusQueued
		}
		jobs = append(jobs, job{indexJob(t, s, "t1", "typ", st, at), at})
	}
	other := indexJob(t, s, "t2", "typ", StatusDone, base)
	want := make([]string, len(jobs))
	sort.Slice(jobs, func(i, j int) bool {
		if !jobs[i].at.Equal(jobs[j].at) {
			return jobs[i].at.After(jobs[j].at)
		}
		return jobs[i].id > jobs[j].id
	})
	for i, j := range jobs {
		want[i] = j.id
	}
	for _, limit := range []int{1, 2, 3, 4, 50} {
		got, pages := listAll(t, s, ListQuery{Tenant: "t1", Limit: limit})
		if !slices.Equal(got, want) {
			t.Fatalf("limit %d: got %v\nwant %v", limit, got, want)
		}
		if limit == 3 && pages != 4 {
			t.Fatalf("limit 3: %d pages, want 4", pages)
		}
	}
	queued, _ := listAll(t, s, ListQuery{Tenant: "t1", Status: StatusQueued, Limit: 2})
	if len(queued) != 6 {
		t.Fatalf("queued: %v", queued)
	}
	if got, _ := listAll(t, s, ListQuery{Tenant: "t1", Type: "other"}); len(got) != 0 {
		t.Fatalf("type filter: %v", got)
	}
	if got, _ := listAll(t, s, ListQuery{Tenant: "t2"}); !slices.Equal(got, []string{other}) {
		t.Fatalf("t2 sees %v", got)
	}
	if got, _ := listAll(t, s, ListQuery{Tenant: "t3"}); len(got) != 0 {
		t.Fatalf("t3 sees %v", got)
	}
	// A record that expired before its entry is skipped.
	k, _ := s.Keys(want[0], "")
	s.rdb.Del(ctx, k.Record)
	if got, _ := listAll(t, s, ListQuery{Tenant: "t1"}); !slices.Equal(got, want[1:]) {
		t.Fatalf("after an expiry: %v", got)
	}
	ttl := s.rdb.PTTL(ctx, s.IndexKey("t1")).Val()
	if ttl <= 0 || ttl > s.cfg.Retention {
		t.Fatalf("index TTL %s, want (0, %s]", ttl, s.cfg.Retention)
	}
	// A write now trims what is older than the retention.
	indexJob(t, s, "t1", "typ", StatusQueued, base.Add(s.cfg.Retention+time.Minute))
	if n := s.rdb.ZCard(ctx, s.IndexKey("t1")).Val(); n != 1 {
		t.Fatalf("index holds %d entries after the trim, want 1", n)
	}
	for _, bad := range []string{"!!", "MTIz", encodeCursor(1, "nope")} {
		if _, err := s.List(ctx, ListQuery{Tenant: "t1", Cursor: bad}); !errors.Is(err, ErrBadCursor) {
			t.Fatalf("cursor %q: %v", bad, err)
		}
	}
}

// BenchmarkList50Of100k: a page of 50 of a tenant with 100,000 retained jobs (records and index
// written directly), first pages and deep pages; reports p50 and p99 per page.
func BenchmarkList50Of100k(b *testing.B) {
	db := redistest.NewDB(b)
	s := New(db.Client, locking.New(db.Client), Config{WorkerID: "w"})
	ctx := context.Background()
	const n = 100_000
	base := time.Now().Add(-24 * time.Hour)
	pipe := s.rdb.Pipeline()
	ids := make([]string, n)
	for i := range n {
		at := base.Add(time.Duration(i) * time.Millisecond)
		id := NewJobID(fmt.Sprintf("r-%d", i), at)
		ids[i] = id
		k, _ := s.Keys(id, "")
		pipe.HSet(ctx, k.Record, FieldJobID, id, FieldType, "typ", FieldQueue, "default", FieldTenant, "t1",
			FieldStatus, "done", FieldAttempt, 1, FieldCreatedAt, at.UnixMilli(), FieldUpdatedAt, at.UnixMilli(),
			FieldPayload, `{"tenant_id":"t1","resource_id":"page"}`)
		pipe.ZAdd(ctx, s.IndexKey("t1"), redis.Z{Score: float64(at.UnixMilli()), Member: id})
		if pipe.Len() >= 2000 {
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
	// Cursors spread over the whole index: each timed call reads a page somewhere in it.
	var cursors []string
	for i := n - 1; i > 0; i -= 997 {
		at := base.Add(time.Duration(i) * time.Millisecond)
		cursors = append(cursors, encodeCursor(at.UnixMilli(), ids[i]))
	}
	cursors[0] = ""
	var took []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		p, err := s.List(ctx, ListQuery{Tenant: "t1", Limit: 50, Cursor: cursors[i%len(cursors)]})
		took = append(took, time.Since(t0))
		if err != nil || len(p.Jobs) != 50 {
			b.Fatalf("page: %d jobs, %v", len(p.Jobs), err)
		}
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
}
