package jobstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/locking"
)

// commandCalls is how many times the server ran each of names (INFO commandstats), scripts'
// commands included.
func commandCalls(t *testing.T, s *Store, names ...string) int {
	t.Helper()
	info := s.rdb.Info(context.Background(), "commandstats").Val()
	n := 0
	for _, line := range strings.Split(info, "\n") {
		for _, name := range names {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":calls="); ok {
				v, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				n += v
			}
		}
	}
	return n
}

// A tenant's GET /jobs with tags_match=all over 8 tags whose smallest index never meets the last
// one: each call is one Lua script, which blocks Redis for every tenant while it runs. Its work
// must stay within a small multiple of the page size. It read 20 x limit entries and looked each
// up in up to 7 other indexes (about 28,000 commands and 30 ms at limit 200, per request).
func TestReview2TagsAllWorkIsBoundedByThePageNotTheTags(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t, 0)
	s := New(rdb, locking.New(rdb), Config{WorkerID: "w"})
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	// t8's jobs are tagged t1..t6 too, never t7; t7 is bigger, so t8 drives the walk.
	for i := range 300 {
		indexTagged(t, s, "x", "typ", StatusQueued, base.Add(time.Duration(i)*time.Millisecond), []string{"t8", "t1", "t2", "t3", "t4", "t5", "t6"}, "")
	}
	for i := range 400 {
		indexTagged(t, s, "x", "typ", StatusQueued, base.Add(time.Duration(1000+i)*time.Millisecond), []string{"t7"}, "")
	}
	const limit = 10
	before := commandCalls(t, s, "zscore", "zrevrangebyscore", "zrangebyscore", "zcard")
	p, err := s.List(context.Background(), ListQuery{Tenant: "x", Tags: []string{"t8", "t1", "t2", "t3", "t4", "t5", "t6", "t7"}, TagsMatch: TagsAll, Limit: limit})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Jobs) != 0 || p.Next == "" {
		t.Fatalf("page: %d jobs, next %q; want none and a cursor to go on", len(p.Jobs), p.Next)
	}
	if n := commandCalls(t, s, "zscore", "zrevrangebyscore", "zrangebyscore", "zcard") - before; n > 12*limit {
		t.Fatalf("one 'all' page of %d ran %d index commands, want at most %d", limit, n, 12*limit)
	}
}
