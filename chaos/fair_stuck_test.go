package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// reportStuck logs, for each key with a job not done, where its first such job is: its status and
// last timeline events, every Redis key naming its id (the record, asynq's task) with its fields,
// and the admission state's keys that name the key. A run that fails on a stuck job then says
// which part of the path kept it.
func (r *run) reportStuck(ids [][]string, views map[string]jobView) {
	reported := 0
	for k, list := range ids {
		j := slices.IndexFunc(list, func(id string) bool { return views[id].Status != "done" })
		if j < 0 {
			continue
		}
		if reported++; reported > 5 {
			r.t.Logf("(more keys with jobs not done)")
			return
		}
		id, v := list[j], views[list[j]]
		r.t.Logf("k%d: job %d of %d not done: %s, status %q, last events %s", k, j, len(list), id, v.Status, lastEvents(v, 6))
		for _, key := range scanKeys(r.rdb, "*"+id+"*") {
			r.t.Logf("  %s: %s", key, describeKey(r.rdb, key))
		}
		for _, key := range scanKeys(r.rdb, "*fair:*") {
			if d := describeKey(r.rdb, key); strings.Contains(d, fmt.Sprintf("k%d", k)) || strings.Contains(d, id) {
				r.t.Logf("  %s: %.600s", key, d)
			}
		}
	}
}

func lastEvents(v jobView, n int) string {
	tl := v.Timeline[max(0, len(v.Timeline)-n):]
	parts := make([]string, len(tl))
	for i, e := range tl {
		parts[i] = fmt.Sprintf("%s@%d(token %d)", e.Event, e.At, e.Token)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// describeKey is a key's type and content, cut short: hashes and sorted sets in full up to 50
// entries, lists and sets their first 50 members.
func describeKey(rdb redis.UniversalClient, key string) string {
	ctx := context.Background()
	typ, err := rdb.Type(ctx, key).Result()
	if err != nil {
		return err.Error()
	}
	var content any
	switch typ {
	case "hash":
		m, _ := rdb.HGetAll(ctx, key).Result()
		for f, val := range m {
			if len(val) > 80 {
				m[f] = val[:80] + "…"
			}
		}
		content = m
	case "zset":
		content, _ = rdb.ZRangeWithScores(ctx, key, 0, 49).Result()
	case "list":
		content, _ = rdb.LRange(ctx, key, 0, 49).Result()
	case "set":
		content, _ = rdb.SRandMemberN(ctx, key, 50).Result()
	case "string":
		s, _ := rdb.Get(ctx, key).Result()
		content = fmt.Sprintf("%.80q", s)
	}
	ttl, _ := rdb.PTTL(ctx, key).Result()
	return fmt.Sprintf("%s ttl %v %v", typ, ttl, content)
}
