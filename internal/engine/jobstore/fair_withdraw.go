package jobstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

var fairWithdrawScript = redis.NewScript(fairAdmit + "\n" + scripts.Read("fair_withdraw.lua"))

// FairWithdraw takes job id, which ended while it waited in a key's list of shard sh (cancelled,
// expired), off its key's backlog at once; the admission passes over its entry when its turn
// comes. It reports whether the job was in a list of sh: false for a job admitted already (its
// end frees it), withdrawn already, or waiting in another shard.
func (s *Store) FairWithdraw(ctx context.Context, sh FairShard, id string) (bool, error) {
	k := s.FairKeys(sh)
	n, err := fairWithdrawScript.Run(ctx, s.rdb, k.list(), k.args(FairPolicy{}, id)...).Int()
	if err != nil {
		return false, fmt.Errorf("jobstore: fair withdraw %s: %w", id, err)
	}
	return n == 1, nil
}
