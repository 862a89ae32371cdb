package jobstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// A fair type's shard count may change between deploys. A key's jobs then wait in its shard of
// the old layout, where nothing of the new one looks: so every layout a process used is recorded
// (the type's fair:layouts set, in its unsharded slot), and the sweep visits each until it is
// empty. The set expires a retention after the last process used the type.

// layoutsKey is the set of the shard counts type typ was used with.
func (s *Store) layoutsKey(typ string) string {
	return s.FairKeys(FairShard{Type: typ}).Layouts
}

// FairUseLayout records that type typ's admission state is used in n shards, and returns every
// layout recorded (n among them), in one round trip.
func (s *Store) FairUseLayout(ctx context.Context, typ string, n int) ([]int, error) {
	key := s.layoutsKey(typ)
	pipe := s.rdb.TxPipeline()
	pipe.SAdd(ctx, key, max(n, 1))
	pipe.PExpire(ctx, key, s.cfg.Retention)
	members := pipe.SMembers(ctx, key)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("jobstore: fair layouts %s: %w", typ, err)
	}
	return layoutCounts(members.Val()), nil
}

// FairLayouts are the layouts recorded for type typ (shard counts), read without recording one.
func (s *Store) FairLayouts(ctx context.Context, typ string) ([]int, error) {
	members, err := s.rdb.SMembers(ctx, s.layoutsKey(typ)).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: fair layouts %s: %w", typ, err)
	}
	return layoutCounts(members), nil
}

// maxLayoutShards bounds a recorded layout's shard count (a process records at most 64): a set
// written by something else costs the sweep and a skip at most this many shards' scripts.
const maxLayoutShards = 1024

// layoutCounts reads the layouts set's members (a member that is not a count in bounds is skipped).
func layoutCounts(members []string) []int {
	out := make([]int, 0, len(members))
	for _, m := range members {
		if v, err := strconv.Atoi(m); err == nil && v >= 1 && v <= maxLayoutShards {
			out = append(out, v)
		}
	}
	return out
}

// FairRetireLayout forgets layout n of type typ (the sweep found its shards empty).
func (s *Store) FairRetireLayout(ctx context.Context, typ string, n int) error {
	if err := s.rdb.SRem(ctx, s.layoutsKey(typ), n).Err(); err != nil {
		return fmt.Errorf("jobstore: fair layouts %s: %w", typ, err)
	}
	return nil
}

// FairLayoutEmpty reports whether layout n of type typ holds nothing any more: no job admitted,
// waiting or blocking, no entry left in a key's list (withdrawn ones included: the once hash holds
// every listed job), and no key ready or parked. Only such a layout may be forgotten: the sweep
// visits a recorded layout only, and what a forgotten one held would stay forever.
func (s *Store) FairLayoutEmpty(ctx context.Context, typ string, n int) (bool, error) {
	pipe := s.rdb.Pipeline()
	var counts []*redis.IntCmd
	for _, sh := range FairShards(typ, n) {
		k := s.FairKeys(sh)
		counts = append(counts, pipe.HLen(ctx, k.Admitted), pipe.HLen(ctx, k.Once), pipe.ZCard(ctx, k.Backlog),
			pipe.ZCard(ctx, k.Running), pipe.ZCard(ctx, k.Ready), pipe.ZCard(ctx, k.Parked), pipe.SCard(ctx, k.Blocked))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return false, fmt.Errorf("jobstore: fair layout %s/%d: %w", typ, n, err)
	}
	for _, c := range counts {
		if c.Val() != 0 {
			return false, nil
		}
	}
	return true, nil
}
