package jobstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/locking"
)

// On a cluster (48 stripes over three masters) a list pages like one index: every job exactly
// once, newest first, ids descending within a millisecond, per tenant, per tag (any and all) and
// across tenants, at page sizes below and above the stripe count; the reconciler's walk sees every
// job. A third of the jobs share one resource, so one stripe holds far more than its share and a
// page needs a second read of it (list_merge.go's rounds).
func TestClusterListPagesEveryJobOnceInOrder(t *testing.T) {
	t.Parallel()
	db := redistest.NewCluster(t)
	s := New(db.Client, locking.New(db.Client, locking.WithPrefix(db.Prefix)), Config{WorkerID: "w"})
	ctx := context.Background()
	base := time.Now().Add(-time.Hour)
	type made struct {
		id, tenant string
		tags       []string
	}
	var jobs []made
	pipe := s.rdb.Pipeline()
	for i := range 600 {
		resource := fmt.Sprint("res-", i)
		if i%3 == 0 {
			resource = "hot" // one stripe takes 200 of the 600
		}
		tenant := []string{"t1", "t2", "t3"}[i%3]
		var tags []string
		switch i % 4 {
		case 1:
			tags = []string{"red"}
		case 2:
			tags = []string{"blue", "red"}
		}
		at := base.Add(time.Duration(i/5) * time.Millisecond) // five jobs a millisecond
		id := NewJobID(resource, at)
		k, _ := s.Keys(id, "")
		pipe.HSet(ctx, k.Record, FieldJobID, id, FieldType, "typ", FieldQueue, "default", FieldTenant, tenant,
			FieldStatus, string(StatusQueued), FieldAttempt, 1, FieldCreatedAt, at.UnixMilli(), FieldTags, joinTags(tags))
		pipe.PExpire(ctx, k.Record, s.cfg.Retention)
		s.QueueIndex(ctx, pipe, tenant, id, tags, at)
		jobs = append(jobs, made{id, tenant, tags})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
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
	all := func(made) bool { return true }
	red := func(j made) bool { return slices.Contains(j.tags, "red") }
	cases := []struct {
		name string
		q    ListQuery
		keep func(made) bool
	}{
		{"all tenants, 7 a page", ListQuery{Limit: 7}, all},
		{"all tenants, 50 a page", ListQuery{Limit: 50}, all},
		{"all tenants, 200 a page", ListQuery{Limit: 200}, all},
		{"t1 (the hot resource's)", ListQuery{Tenant: "t1", Limit: 20}, func(j made) bool { return j.tenant == "t1" }},
		{"t2 red", ListQuery{Tenant: "t2", Tags: []string{"red"}, Limit: 9}, func(j made) bool { return j.tenant == "t2" && red(j) }},
		{"blue or red", ListQuery{Tags: []string{"blue", "red"}, Limit: 30}, red},
		{"blue and red", ListQuery{Tags: []string{"blue", "red"}, TagsMatch: TagsAll, Limit: 11}, func(j made) bool {
			return slices.Contains(j.tags, "blue")
		}},
		{"a window", ListQuery{CreatedAfter: base.Add(20 * time.Millisecond), CreatedBefore: base.Add(90 * time.Millisecond), Limit: 13},
			func(j made) bool { ms := createdMS(j.id) - base.UnixMilli(); return ms >= 20 && ms < 90 }},
	}
	for _, c := range cases {
		got, _ := listAll(t, s, c.q)
		if w := want(c.keep); !slices.Equal(got, w) {
			t.Fatalf("%s: listed %d, want %d in order (first difference at %d)", c.name, len(got), len(w), firstDifference(got, w))
		}
	}
	var walked []string
	for cursor := ""; ; {
		open, next, err := s.OpenJobs(ctx, cursor, 100)
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
	if w := want(all); !slices.Equal(walked, w) {
		t.Fatalf("the reconciler's walk saw %d jobs, want %d in order", len(walked), len(w))
	}
}

// firstDifference is the first index where a and b differ.
func firstDifference(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
