package jobstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// recordFields reads fields of each job id's record in one round trip: out[i][j] is fields[j] of
// ids[i], "" where the record or the field is gone. An id that names no job is an error; what
// names the read in a Redis error.
func (s *Store) recordFields(ctx context.Context, what string, ids []string, fields ...string) ([][]string, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(ids))
	for i, id := range ids {
		k, err := s.Keys(id, "")
		if err != nil {
			return nil, err
		}
		cmds[i] = pipe.HMGet(ctx, k.Record, fields...)
	}
	if len(ids) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("jobstore: read %s: %w", what, err)
		}
	}
	out := make([][]string, len(ids))
	for i, c := range cmds {
		out[i] = make([]string, len(fields))
		for j, v := range c.Val() {
			if j < len(fields) {
				out[i][j], _ = v.(string)
			}
		}
	}
	return out, nil
}
