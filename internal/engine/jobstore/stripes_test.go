package jobstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/locking"
)

func newStripedStore(t *testing.T, stripes int) *Store {
	db := redistest.NewDB(t)
	return New(db.Client, locking.New(db.Client), Config{WorkerID: "w", IndexStripes: stripes})
}

// Lists over striped indexes page like one index: newest first, ids descending within a
// millisecond, no job twice or missed, per tenant, per tag (any and all), across tenants, and an
// entry of the unstriped key from before the striping among them; the reconciler's walk sees
// every job. The entries are spread over the stripes.
func TestStripedIndexesListLikeOne(t *testing.T) {
	t.Parallel()
	s := newStripedStore(t, 4)
	ctx := context.Background()
	base := time.Now().Add(-time.Minute)
	type made struct {
		id, tenant string
		tags       []string
	}
	var jobs []made
	for i := range 40 {
		tenant := []string{"t1", "t2"}[i%2]
		var tags []string
		switch i % 3 {
		case 1:
			tags = []string{"red"}
		case 2:
			tags = []string{"blue", "red"}
		}
		at := base.Add(time.Duration(i/4) * time.Millisecond) // four jobs a millisecond
		jobs = append(jobs, made{indexTagged(t, s, tenant, "typ", StatusQueued, at, tags, ""), tenant, tags})
	}
	// One entry written before the striping, in the unstriped key of all jobs and of t1.
	legacy := NewJobID("legacy", base.Add(5*time.Millisecond))
	k, _ := s.Keys(legacy, "")
	s.rdb.HSet(ctx, k.Record, FieldJobID, legacy, FieldType, "typ", FieldTenant, "t1", FieldStatus, string(StatusQueued),
		FieldCreatedAt, base.Add(5*time.Millisecond).UnixMilli())
	for _, key := range []string{s.IndexKey(""), s.IndexKey("t1")} {
		s.rdb.ZAdd(ctx, key, redis.Z{Score: float64(createdMS(legacy)), Member: legacy})
	}
	jobs = append(jobs, made{legacy, "t1", nil})

	used := map[string]bool{}
	for _, j := range jobs[:40] {
		used[s.IndexKeyOf("", j.id)] = true
	}
	if len(used) < 2 || used[s.IndexKey("")] {
		t.Fatalf("the entries sit in %d stripe keys %v, want several, none the unstriped one", len(used), used)
	}
	want := func(keep func(made) bool) []string {
		var ids []string
		for _, j := range jobs {
			if keep(j) {
				ids = append(ids, j.id)
			}
		}
		slices.SortFunc(ids, func(a, b string) int {
			if c := createdMS(b) - createdMS(a); c != 0 {
				return int(c)
			}
			return strings.Compare(b, a)
		})
		return ids
	}
	cases := []struct {
		name string
		q    ListQuery
		keep func(made) bool
	}{
		{"all tenants", ListQuery{Limit: 7}, func(made) bool { return true }},
		{"t1", ListQuery{Tenant: "t1", Limit: 5}, func(j made) bool { return j.tenant == "t1" }},
		{"t2 red", ListQuery{Tenant: "t2", Tags: []string{"red"}, Limit: 3}, func(j made) bool {
			return j.tenant == "t2" && slices.Contains(j.tags, "red")
		}},
		{"blue and red", ListQuery{Tags: []string{"blue", "red"}, TagsMatch: TagsAll, Limit: 4}, func(j made) bool {
			return slices.Contains(j.tags, "blue")
		}},
	}
	for _, c := range cases {
		got, _ := listAll(t, s, c.q)
		if w := want(c.keep); !slices.Equal(got, w) {
			t.Fatalf("%s: listed %d %v, want %d %v", c.name, len(got), got, len(w), w)
		}
	}
	var walked []string
	for cursor := ""; ; {
		open, next, err := s.OpenJobs(ctx, cursor, 6)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range open {
			walked = append(walked, o.JobID)
		}
		if cursor = next; next == "" {
			break
		}
	}
	if w := want(func(made) bool { return true }); !slices.Equal(walked, w) {
		t.Fatalf("the reconciler's walk saw %d jobs, want %d", len(walked), len(w))
	}
}

// The sweep reads every stripe of the expiry index, the most overdue first, the unstriped key's
// entries among them; Unindex takes entries out of their stripe and of the unstriped key.
func TestStripedExpiryIndexSweepsEveryStripe(t *testing.T) {
	t.Parallel()
	s := newStripedStore(t, 4)
	ctx := context.Background()
	now := time.Now()
	var ids []string
	pipe := s.rdb.Pipeline()
	for i := range 20 {
		id := NewJobID(fmt.Sprint("r", i), now)
		ids = append(ids, id) // ids[i] is due i seconds ago, ids[0] the least overdue
		s.QueueExpiry(ctx, pipe, id, now.Add(-time.Duration(i)*time.Second))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	legacy := NewJobID("legacy", now)
	s.rdb.ZAdd(ctx, s.ExpiryKey(), redis.Z{Score: float64(now.Add(-time.Hour).UnixMilli()), Member: legacy})
	if n := s.rdb.Exists(ctx, s.ExpiryKeys()[1:]...).Val(); n < 2 {
		t.Fatalf("%d stripes hold entries, want several", n)
	}
	due, err := s.DueForExpiry(ctx, now, 5)
	if err != nil {
		t.Fatal(err)
	}
	if w := []string{legacy, ids[19], ids[18], ids[17], ids[16]}; !slices.Equal(due, w) {
		t.Fatalf("due %v, want the most overdue first %v", due, w)
	}
	if err := s.Unindex(ctx, due...); err != nil {
		t.Fatal(err)
	}
	due, err = s.DueForExpiry(ctx, now, 100)
	if err != nil {
		t.Fatal(err)
	}
	if w := []string{ids[15], ids[14]}; len(due) != 16 || !slices.Equal(due[:2], w) {
		t.Fatalf("after the unindex: %d due starting %v, want 16 starting %v", len(due), due[:min(2, len(due))], w)
	}
	if err := s.Reindex(ctx, ids[15], now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if score := s.rdb.ZScore(ctx, s.ExpiryKeyOf(ids[15]), ids[15]).Val(); int64(score) != now.Add(time.Hour).UnixMilli() {
		t.Fatalf("reindexed entry scored %v in its stripe", score)
	}
}

// On a cluster of three masters the store stripes its indexes by default, the stripes spread
// evenly: each master holds a third of the expiry index's and of the index of all jobs'.
func TestStripesSpreadEvenlyOverMasters(t *testing.T) {
	t.Parallel()
	db := redistest.NewCluster(t)
	s := New(db.Client, locking.New(db.Client, locking.WithPrefix(db.Prefix)), Config{WorkerID: "w"})
	if s.Stripes() != clusterStripes {
		t.Fatalf("%d stripes on a cluster, want %d", s.Stripes(), clusterStripes)
	}
	ctx := context.Background()
	for _, keys := range [][]string{s.ExpiryKeys()[1:], s.indexKeys("")[1:], s.indexKeys("acme")[1:]} {
		per := map[string]int{}
		for _, key := range keys {
			m, err := db.Client.MasterForKey(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			per[m.Options().Addr]++
		}
		for addr, n := range per {
			if len(per) != 3 || n != clusterStripes/3 {
				t.Fatalf("stripes per master %v (%s: %d), want %d on each of 3", per, addr, n, clusterStripes/3)
			}
		}
	}
}
