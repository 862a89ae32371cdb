package jobstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

var resealScript = script("reseal.lua")

// Rewrite is one field of a record to write again: New replaces Old, if the field still holds Old.
type Rewrite struct {
	Field, Old, New string
}

// Reseal writes the rewrites to job id's record, each compare-and-set in one script
// (scripts/reseal.lua), and returns how many were written; a field written meanwhile is left
// with its newer value.
func (s *Store) Reseal(ctx context.Context, id string, rw []Rewrite) (int, error) {
	if len(rw) == 0 {
		return 0, nil
	}
	k, err := s.Keys(id, "")
	if err != nil {
		return 0, err
	}
	args := make([]any, 0, 3*len(rw))
	for _, r := range rw {
		args = append(args, r.Field, r.Old, r.New)
	}
	n, err := resealScript.Run(ctx, s.rdb, []string{k.Record}, args...).Int()
	if err != nil {
		return 0, fmt.Errorf("jobstore: reseal %s: %w", id, err)
	}
	return n, nil
}

// ScanJobs calls fn with the id of every job record in Redis (SCAN on each master of a cluster),
// finished jobs included, in no particular order; a job may be seen twice (SCAN's guarantee).
// It stops at fn's first error.
func (s *Store) ScanJobs(ctx context.Context, fn func(ctx context.Context, id string) error) error {
	pattern := globEscape(s.locks.Key("", "")) // "<prefix>:{}:"
	pattern = strings.TrimSuffix(pattern, "{}:") + "{*}:job:*"
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			i := strings.LastIndex(key, ":job:")
			if i < 0 || !ValidJobID(key[i+5:]) {
				continue // a timeline, or another key that matched the glob
			}
			if err := fn(ctx, key[i+5:]); err != nil {
				return err
			}
		}
		return iter.Err()
	}
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	}
	return scan(ctx, s.rdb)
}

// globEscape escapes SCAN MATCH's special characters in a literal key part.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
