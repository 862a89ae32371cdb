package jobstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// listMerged is listEntries over an index split in stripes (stripes.go): keysets[i] are stripe
// i's keys (its index, or its tags' indexes). Each stripe's page is read in one pipeline (one
// round trip per node) and the pages merged, newest first; a job in two stripes (the unstriped
// key and its own) is listed once. When a stripe's 'all' walk stopped at its budget, the merged
// page holds only the entries down to the newest such stop, and resumes after it.
func (s *Store) listMerged(ctx context.Context, keysets [][]string, maxScore, after string, limit int, minScore, match string) ([]indexEntry, *indexEntry, error) {
	if len(keysets) == 1 {
		return s.listEntries(ctx, keysets[0], maxScore, after, limit, minScore, match)
	}
	args := []any{maxScore, after, limit, minScore, match}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(keysets))
	for i, keys := range keysets {
		cmds[i] = listScript.EvalSha(ctx, pipe, keys, args...)
	}
	_, _ = pipe.Exec(ctx) // each command's error is looked at below
	var all []indexEntry
	var resume *indexEntry
	seen := map[string]bool{}
	for i, c := range cmds {
		res, err := c.Result()
		if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			res, err = listScript.Run(ctx, s.rdb, keysets[i], args...).Result() // first use on that node
		}
		if err != nil {
			return nil, nil, fmt.Errorf("jobstore: list: %w", err)
		}
		entries, stop, err := parseListReply(res)
		if err != nil {
			return nil, nil, err
		}
		for _, e := range entries {
			if !seen[e.id] {
				seen[e.id] = true
				all = append(all, e)
			}
		}
		if stop != nil && (resume == nil || newer(*stop, *resume)) {
			resume = stop
		}
	}
	slices.SortFunc(all, func(a, b indexEntry) int {
		if newer(a, b) {
			return -1
		}
		if newer(b, a) {
			return 1
		}
		return 0
	})
	if resume != nil {
		// Older entries than the stop may be missing from the stripe that stopped there.
		all = slices.DeleteFunc(all, func(e indexEntry) bool { return newer(*resume, e) })
	}
	if len(all) > limit {
		return all[:limit], nil, nil
	}
	return all, resume, nil
}

// newer reports whether a comes before b in a list: a higher score, or the same and a higher id.
func newer(a, b indexEntry) bool {
	if c := cmp.Compare(a.score, b.score); c != 0 {
		return c > 0
	}
	return a.id > b.id
}
