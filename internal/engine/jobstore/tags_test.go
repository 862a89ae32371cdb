package jobstore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestNormalizeTags(t *testing.T) {
	t.Parallel()
	got, err := NormalizeTags([]string{"b", "a", "b", "env=prod", "x:y.z_-"})
	if err != nil || !slices.Equal(got, []string{"b", "a", "env=prod", "x:y.z_-"}) {
		t.Fatalf("folded: %v %v", got, err)
	}
	if got, err := NormalizeTags(nil); got != nil || err != nil {
		t.Fatalf("none: %v %v", got, err)
	}
	nine := []string{"1", "2", "3", "4", "5", "6", "7", "8", "9"}
	for _, bad := range [][]string{{""}, {strings.Repeat("a", 65)}, {"a b"}, {"a,b"}, {"{x}"}, {"é"}, nine} {
		if _, err := NormalizeTags(bad); !errors.Is(err, ErrBadTags) {
			t.Fatalf("%q: %v", bad, err)
		}
	}
	if got, err := NormalizeTags([]string{"1", "1", "2"}); err != nil || len(got) != 2 {
		t.Fatalf("folded: %v %v", got, err)
	}
}

// Tags select through their indexes, any or all of them, within a creation window, with the
// error filter; a sparse 'all' walk continues across pages past its read budget; the tag indexes
// are trimmed and expire as the tenant's index does.
func TestListByTags(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Millisecond) }
	a := indexTagged(t, s, "t1", "typ", StatusFailed, at(1), []string{"red"}, "upstream said 503 Service Unavailable")
	ab := indexTagged(t, s, "t1", "typ", StatusDone, at(2), []string{"red", "blue"}, "")
	b := indexTagged(t, s, "t1", "typ", StatusQueued, at(3), []string{"blue"}, "")
	_ = indexTagged(t, s, "t2", "typ", StatusQueued, at(4), []string{"red", "blue"}, "")
	plain := indexJob(t, s, "t1", "typ", StatusQueued, at(5))

	for _, c := range []struct {
		name string
		q    ListQuery
		want []string
	}{
		{"any", ListQuery{Tenant: "t1", Tags: []string{"red", "blue"}}, []string{b, ab, a}},
		{"any, pages of one", ListQuery{Tenant: "t1", Tags: []string{"blue", "red"}, Limit: 1}, []string{b, ab, a}},
		{"all", ListQuery{Tenant: "t1", Tags: []string{"red", "blue"}, TagsMatch: TagsAll}, []string{ab}},
		{"one tag", ListQuery{Tenant: "t1", Tags: []string{"red"}}, []string{ab, a}},
		{"unknown tag", ListQuery{Tenant: "t1", Tags: []string{"green"}}, nil},
		{"window", ListQuery{Tenant: "t1", CreatedAfter: at(2), CreatedBefore: at(5)}, []string{b, ab}},
		{"window and tag", ListQuery{Tenant: "t1", Tags: []string{"blue"}, CreatedBefore: at(3)}, []string{ab}},
		{"error text", ListQuery{Tenant: "t1", Error: "service unavail"}, []string{a}},
		{"every tenant", ListQuery{Tags: []string{"red"}, TagsMatch: TagsAll}, nil},
		{"untagged", ListQuery{Tenant: "t1"}, []string{plain, b, ab, a}},
	} {
		got, _ := listAll(t, s, c.q)
		if c.name == "every tenant" {
			if len(got) != 3 {
				t.Fatalf("%s: %v", c.name, got)
			}
			continue
		}
		if !slices.Equal(got, c.want) {
			t.Fatalf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
	p, err := s.List(ctx, ListQuery{Tenant: "t1", Tags: []string{"red"}, Limit: 1})
	if err != nil || len(p.Jobs) != 1 || !slices.Equal(p.Jobs[0].Tags, []string{"red", "blue"}) {
		t.Fatalf("listed tags: %+v %v", p.Jobs, err)
	}

	// 'all' over a sparse intersection: 150 jobs tagged many, every 60th also rare; pages of 2
	// read at most 40 entries each, and the walk still finds every one.
	var want []string
	for i := range 150 {
		tags := []string{"many"}
		if i%60 == 0 {
			tags = append(tags, "rare")
		}
		id := indexTagged(t, s, "t3", "typ", StatusQueued, at(100+i), tags, "")
		if i%60 == 0 {
			want = append([]string{id}, want...)
		}
	}
	// The driver is the smaller index: make rare's bigger with jobs that are not 'many'.
	for i := range 200 {
		indexTagged(t, s, "t3", "typ", StatusQueued, at(400+i), []string{"rare"}, "")
	}
	got, pages := listAll(t, s, ListQuery{Tenant: "t3", Tags: []string{"many", "rare"}, TagsMatch: TagsAll, Limit: 2, CreatedBefore: at(400)})
	if !slices.Equal(got, want) || pages < 3 {
		t.Fatalf("sparse all: got %v in %d pages, want %v", got, pages, want)
	}

	// The tag indexes live no longer than the jobs: a TTL of the retention, trimmed by a write.
	for _, key := range []string{s.TagIndexKey("t1", "red"), s.TagIndexKey("", "red")} {
		if ttl := s.rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > s.cfg.Retention {
			t.Fatalf("%s TTL %s, want (0, %s]", key, ttl, s.cfg.Retention)
		}
	}
	indexTagged(t, s, "t1", "typ", StatusQueued, base.Add(s.cfg.Retention+time.Minute), []string{"red"}, "")
	if n := s.rdb.ZCard(ctx, s.TagIndexKey("t1", "red")).Val(); n != 1 {
		t.Fatalf("tag index holds %d entries after the trim, want 1", n)
	}
}
