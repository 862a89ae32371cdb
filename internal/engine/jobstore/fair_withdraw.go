package jobstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

var fairWithdrawScript = redis.NewScript(fairAdmit + "\n" + scripts.Read("fair_withdraw.lua"))

// FairWithdraw takes job id, which ended while it waited in key's list of shard sh (cancelled,
// expired), off its key's backlog at once; the admission passes over its entry when its turn
// comes. key is the record's FieldFairKey, given only for a confirmed job (before its
// confirmation its wait may not have run); "" otherwise, and for a workflow node or a replay,
// whose wait names its key in the once hash. It reports whether the job left a backlog: false
// for a job admitted already (its end frees it) or not known to be in a list.
func (s *Store) FairWithdraw(ctx context.Context, sh FairShard, id, key string) (bool, error) {
	k := s.FairKeys(sh)
	n, err := fairWithdrawScript.Run(ctx, s.rdb, k.list(), k.args(FairPolicy{}, id, key, ms(s.cfg.Retention))...).Int()
	if err != nil {
		return false, fmt.Errorf("jobstore: fair withdraw %s: %w", id, err)
	}
	return n == 1, nil
}
