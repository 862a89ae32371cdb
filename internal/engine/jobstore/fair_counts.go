package jobstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"
)

// FairKeyCount is one key's waiting (Backlog) and admitted-not-ended (Running) jobs.
type FairKeyCount struct {
	Key              string
	Backlog, Running int64
}

// FairTop is the type's totals and its top keys by backlog and by running jobs (at most top of
// each, merged), for metrics and the API: bounded whatever the number of keys.
type FairTop struct {
	// WaitingKeys have jobs waiting; RunningKeys have jobs admitted and not ended; ReadyKeys may
	// be admitted now (the others wait for capacity, or are at their per-key limit).
	WaitingKeys, RunningKeys, ReadyKeys int64
	// Admitted is how many jobs are admitted and not ended (what the capacity bounds).
	Admitted int64
	// LiveHandlers is the live handlers' count the shards hold (FairSetHandlers; 0: none fresh);
	// Capacity, filled in by the engine, is what bounds Admitted now.
	LiveHandlers, Capacity int64
	TopKeys                []FairKeyCount
}

// FairCounts reads the totals of type typ's n shards and of the shards of its old layouts (old:
// shard counts a change left jobs in, fair_layouts.go), and its top keys (at most top by backlog
// and top by running jobs over every shard, a key's counts in several layouts added up). A key
// with jobs in two layouts counts twice in WaitingKeys and RunningKeys; LiveHandlers is the
// current layout's.
func (s *Store) FairCounts(ctx context.Context, typ string, n int, old []int, top int) (FairTop, error) {
	shards := FairShards(typ, n)
	current := len(shards)
	for _, m := range old {
		shards = append(shards, FairShards(typ, m)...)
	}
	var out FairTop
	var keys []FairKeyCount
	for i, sh := range shards {
		c, err := s.fairShardCounts(ctx, sh, top)
		if err != nil {
			return FairTop{}, err
		}
		out.WaitingKeys += c.WaitingKeys
		out.RunningKeys += c.RunningKeys
		out.ReadyKeys += c.ReadyKeys
		out.Admitted += c.Admitted
		if i < current {
			out.LiveHandlers += c.LiveHandlers // an old layout's count is no live handler's
		}
		keys = append(keys, c.TopKeys...)
	}
	if len(shards) <= 1 {
		out.TopKeys = keys
		return out, nil
	}
	out.TopKeys = topFairKeys(sumFairKeys(keys), top)
	return out, nil
}

// sumFairKeys adds up the counts of a key named by several shards (of different layouts), in the
// order keys first names them.
func sumFairKeys(keys []FairKeyCount) []FairKeyCount {
	out := make([]FairKeyCount, 0, len(keys))
	at := map[string]int{}
	for _, c := range keys {
		if i, ok := at[c.Key]; ok {
			out[i].Backlog += c.Backlog
			out[i].Running += c.Running
			continue
		}
		at[c.Key] = len(out)
		out = append(out, c)
	}
	return out
}

// topFairKeys are the top keys by backlog and the top by running of keys (each a key of one
// shard), merged: what one shard's counts would name.
func topFairKeys(keys []FairKeyCount, top int) []FairKeyCount {
	pick := func(by func(FairKeyCount) int64) []FairKeyCount {
		sorted := slices.Clone(keys)
		slices.SortStableFunc(sorted, func(a, b FairKeyCount) int { return cmp.Compare(by(b), by(a)) })
		out := sorted[:min(top, len(sorted))]
		for len(out) > 0 && by(out[len(out)-1]) == 0 {
			out = out[:len(out)-1] // a key named only for its other count
		}
		return out
	}
	out := pick(func(c FairKeyCount) int64 { return c.Backlog })
	for _, c := range pick(func(c FairKeyCount) int64 { return c.Running }) {
		if !slices.ContainsFunc(out, func(o FairKeyCount) bool { return o.Key == c.Key }) {
			out = append(out, c)
		}
	}
	return out
}

// fairShardCounts reads one shard's totals and its top keys, in one round trip plus one for the
// counts of the keys it names.
func (s *Store) fairShardCounts(ctx context.Context, sh FairShard, top int) (FairTop, error) {
	typ := sh.Type
	k := s.FairKeys(sh)
	pipe := s.rdb.Pipeline()
	keys := pipe.ZCard(ctx, k.Backlog)
	admitted := pipe.HLen(ctx, k.Admitted)
	ready := pipe.ZCard(ctx, k.Ready)
	running := pipe.ZCard(ctx, k.Running)
	handlers := pipe.Get(ctx, k.Handlers)
	totals := func() FairTop {
		live, _ := handlers.Int64() // redis.Nil: no count
		return FairTop{WaitingKeys: keys.Val(), Admitted: admitted.Val(), ReadyKeys: ready.Val(), RunningKeys: running.Val(),
			LiveHandlers: live}
	}
	if top <= 0 {
		// No key named: ZREVRANGE 0 -1 would name them all.
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return FairTop{}, fmt.Errorf("jobstore: fair counts %s: %w", typ, err)
		}
		return totals(), nil
	}
	byBacklog := pipe.ZRevRangeWithScores(ctx, k.Backlog, 0, int64(top-1))
	byRunning := pipe.ZRevRangeWithScores(ctx, k.Running, 0, int64(top-1))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return FairTop{}, fmt.Errorf("jobstore: fair counts %s: %w", typ, err)
	}
	out := totals()
	seen := map[string]int{}
	add := func(key string) int {
		if i, ok := seen[key]; ok {
			return i
		}
		seen[key] = len(out.TopKeys)
		out.TopKeys = append(out.TopKeys, FairKeyCount{Key: key})
		return len(out.TopKeys) - 1
	}
	for _, z := range byBacklog.Val() {
		out.TopKeys[add(z.Member.(string))].Backlog = int64(z.Score)
	}
	for _, z := range byRunning.Val() {
		out.TopKeys[add(z.Member.(string))].Running = int64(z.Score)
	}
	// Each named key's other count.
	pipe = s.rdb.Pipeline()
	backlogs := make([]*redis.FloatCmd, len(out.TopKeys))
	runnings := make([]*redis.FloatCmd, len(out.TopKeys))
	for i, c := range out.TopKeys {
		backlogs[i] = pipe.ZScore(ctx, k.Backlog, c.Key)
		runnings[i] = pipe.ZScore(ctx, k.Running, c.Key)
	}
	if len(out.TopKeys) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return FairTop{}, fmt.Errorf("jobstore: fair counts %s: %w", typ, err)
		}
	}
	for i := range out.TopKeys {
		out.TopKeys[i].Backlog, out.TopKeys[i].Running = int64(backlogs[i].Val()), int64(runnings[i].Val())
	}
	return out, nil
}

// FairKeyCounts reads one key's waiting and admitted-not-ended jobs (zero for a key unknown or
// idle), summed over the shards named (the key's shard in each layout the type has), in one
// round trip: what a tenant may see of a type shared with other tenants.
func (s *Store) FairKeyCounts(ctx context.Context, key string, shards ...FairShard) (FairKeyCount, error) {
	pipe := s.rdb.Pipeline()
	var backlogs, runnings []*redis.FloatCmd
	for _, sh := range shards {
		k := s.FairKeys(sh)
		backlogs = append(backlogs, pipe.ZScore(ctx, k.Backlog, key))
		runnings = append(runnings, pipe.ZScore(ctx, k.Running, key))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return FairKeyCount{}, fmt.Errorf("jobstore: fair counts of a key: %w", err)
	}
	c := FairKeyCount{Key: key}
	for i := range shards {
		c.Backlog += int64(backlogs[i].Val())
		c.Running += int64(runnings[i].Val())
	}
	return c, nil
}
