package jobstore

import (
	"context"
	"slices"
	"testing"
	"time"
)

// The index of all jobs holds every tenant's jobs and those of no tenant, newest first, with the
// tenant of each; it expires with the records like the tenants' indexes.
func TestListAcrossTenants(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	base := time.Now().Add(-time.Minute)
	a := indexJob(t, s, "t1", "typ", StatusQueued, base)
	b := indexJob(t, s, "t2", "typ", StatusDone, base.Add(time.Millisecond))
	c := indexJob(t, s, "", "other", StatusFailed, base.Add(2*time.Millisecond))
	got, pages := listAll(t, s, ListQuery{Limit: 2})
	if want := []string{c, b, a}; !slices.Equal(got, want) || pages != 2 {
		t.Fatalf("all tenants: %v in %d pages, want %v in 2", got, pages, want)
	}
	p, err := s.List(context.Background(), ListQuery{Type: "typ", Status: StatusDone})
	if err != nil || len(p.Jobs) != 1 || p.Jobs[0].JobID != b || p.Jobs[0].Tenant != "t2" {
		t.Fatalf("filtered across tenants: %+v %v", p, err)
	}
	if only, _ := listAll(t, s, ListQuery{Tenant: "t1"}); !slices.Equal(only, []string{a}) {
		t.Fatalf("t1: %v", only)
	}
	if ttl := s.rdb.PTTL(context.Background(), s.IndexKey("")).Val(); ttl <= 0 || ttl > s.cfg.Retention {
		t.Fatalf("index of all jobs has TTL %s, want (0, %s]", ttl, s.cfg.Retention)
	}
}
