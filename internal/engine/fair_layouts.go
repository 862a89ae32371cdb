package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// A fair type's layout is its shard count. Each process records the layout it waits in, the sweep
// visits every recorded one (fair_dispatch.go), and what looks for one job's admission (an
// operator's skip, a replay of a job that blocks its sequence) looks in the old layouts too: a
// shard count may change while jobs wait or block.

// useFairLayout records, at a process's first wait of tc, the layout its jobs wait in, so that the
// sweeps of processes configured later with another shard count still visit it.
func (s *Stack) useFairLayout(ctx context.Context, tc TaskConfig) error {
	if _, done := s.fairLayouts.Load(tc.Type); done {
		return nil
	}
	if _, err := s.store.FairUseLayout(ctx, tc.Type, s.fairShards(tc)); err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	s.fairLayouts.Store(tc.Type, struct{}{})
	return nil
}

// fairOldLayouts are the layouts (shard counts) recorded for tc other than its current one: a
// shard count changed while jobs waited or blocked (useFairLayout).
func (s *Stack) fairOldLayouts(ctx context.Context, tc TaskConfig) ([]int, error) {
	layouts, err := s.store.FairLayouts(ctx, tc.Type)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	return withoutLayout(layouts, s.fairShards(tc)), nil
}

// withoutLayout is layouts without n (the current one).
func withoutLayout(layouts []int, n int) []int {
	return slices.DeleteFunc(layouts, func(m int) bool { return m == n })
}

// fairShardsEverywhere are every shard of tc's current layout and of its old ones.
func (s *Stack) fairShardsEverywhere(ctx context.Context, tc TaskConfig) ([]jobstore.FairShard, error) {
	old, err := s.fairOldLayouts(ctx, tc)
	if err != nil {
		return nil, err
	}
	shards := s.fairShardsOf(tc)
	for _, m := range old {
		shards = append(shards, jobstore.FairShards(tc.Type, m)...)
	}
	return shards, nil
}

// fairShardHolding is the shard that holds job id's admission, id's key being key: its shard in
// the current layout, else in an old one; false when none holds it.
func (s *Stack) fairShardHolding(ctx context.Context, tc TaskConfig, key, id string) (jobstore.FairShard, bool, error) {
	sh := s.fairShardOf(tc, key)
	holds, err := s.store.FairHolds(ctx, sh, id)
	if err != nil || holds {
		return sh, holds, err
	}
	old, err := s.fairOldLayouts(ctx, tc)
	if err != nil {
		return sh, false, err
	}
	for _, m := range old {
		o := fairShardIn(tc.Type, key, m)
		if holds, err := s.store.FairHolds(ctx, o, id); err != nil || holds {
			return o, holds, err
		}
	}
	return sh, false, nil
}
