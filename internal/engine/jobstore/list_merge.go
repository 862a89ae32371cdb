package jobstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// An index split in stripes (stripes.go) is listed by reading each stripe's newest entries and
// merging them. Reading a full page from each of the 49 keys (48 stripes and the unstriped one)
// read 49 pages to return one. So a page reads a few entries of every stripe first (about twice
// its share), and then only the stripes that may still hold one of the page's entries: those
// whose last entry read is newer than the page's last so far. Each round is one pipeline, one
// round trip per master; a page usually takes one round, sometimes two.

// maxListRounds bounds the rounds of an 'all' list, whose script stops at a budget: past it the
// page is short and continues after the newest stripe's stop, as one index's list does.
const maxListRounds = 6

// stripeRead is where the list of one stripe stands.
type stripeRead struct {
	keys []string
	// maxScore and after are the stripe's cursor: its next read starts after them.
	maxScore, after string
	// last is the stripe's last entry read (or where its script stopped); nil before any.
	last *indexEntry
	// done: the stripe has no entry past last.
	done bool
}

// listMerged is listEntries over an index split in stripes: keysets[i] are stripe i's keys (its
// index, or its tags' indexes). A job in two stripes (the unstriped key and its own) is listed
// once. The reply is exact down to the newest entry a stripe still might hold more after; when
// an 'all' list stops there short of a page, it resumes after it.
func (s *Store) listMerged(ctx context.Context, keysets [][]string, maxScore, after string, limit int, minScore, match string) ([]indexEntry, *indexEntry, error) {
	if len(keysets) == 1 {
		return s.listEntries(ctx, keysets[0], maxScore, after, limit, minScore, match)
	}
	reads := make([]*stripeRead, len(keysets))
	for i, keys := range keysets {
		reads[i] = &stripeRead{keys: keys, maxScore: maxScore, after: after}
	}
	var all []indexEntry
	seen := map[string]bool{}
	// Twice a stripe's share of the page, at least 2: with the entries spread evenly, one round.
	k := max(2, 2*((limit+len(keysets)-1)/len(keysets)))
	for round := 0; ; round++ {
		need := stripesToRead(reads, all, limit)
		if len(need) == 0 || (match == TagsAll && round == maxListRounds) {
			break
		}
		if err := s.readStripes(ctx, need, k, minScore, match, func(e indexEntry) {
			if !seen[e.id] {
				seen[e.id] = true
				all = append(all, e)
			}
		}); err != nil {
			return nil, nil, err
		}
		sortNewestFirst(all)
		k = min(limit, 4*k)
	}
	frontier := newestOpen(reads)
	if frontier != nil {
		// Older entries than the frontier may be missing from the stripe that stopped there.
		all = slices.DeleteFunc(all, func(e indexEntry) bool { return newer(*frontier, e) })
	}
	if len(all) >= limit {
		return all[:limit], nil, nil
	}
	return all, frontier, nil
}

// stripesToRead are the stripes that may hold an entry of the page: not done, and last read
// newer than the page's limit-th entry so far (every stripe while there are fewer).
func stripesToRead(reads []*stripeRead, sorted []indexEntry, limit int) []*stripeRead {
	var need []*stripeRead
	for _, r := range reads {
		if r.done {
			continue
		}
		if r.last != nil && len(sorted) >= limit && !newer(*r.last, sorted[limit-1]) {
			continue
		}
		need = append(need, r)
	}
	return need
}

// readStripes reads up to k entries of each stripe of need after its cursor in one pipeline,
// passes each entry to add and moves each stripe's cursor.
func (s *Store) readStripes(ctx context.Context, need []*stripeRead, k int, minScore, match string, add func(indexEntry)) error {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(need))
	for i, r := range need {
		cmds[i] = listScript.EvalSha(ctx, pipe, r.keys, r.maxScore, r.after, k, minScore, match)
	}
	_, _ = pipe.Exec(ctx) // each command's error is looked at below
	for i, c := range cmds {
		r := need[i]
		res, err := c.Result()
		if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			res, err = listScript.Run(ctx, s.rdb, r.keys, r.maxScore, r.after, k, minScore, match).Result() // first use on that node
		}
		if err != nil {
			return fmt.Errorf("jobstore: list: %w", err)
		}
		entries, stop, err := parseListReply(res)
		if err != nil {
			return err
		}
		for _, e := range entries {
			add(e)
		}
		switch {
		case stop != nil:
			r.last = stop
		case len(entries) == k:
			r.last = &entries[len(entries)-1]
		default:
			r.done = true
			continue
		}
		r.maxScore, r.after = strconv.FormatInt(r.last.score, 10), r.last.id
	}
	return nil
}

// newestOpen is the newest last entry of the stripes not done: every stripe has been read down to
// it. nil when every stripe is done.
func newestOpen(reads []*stripeRead) *indexEntry {
	var f *indexEntry
	for _, r := range reads {
		if !r.done && (f == nil || newer(*r.last, *f)) {
			f = r.last
		}
	}
	return f
}

// sortNewestFirst sorts entries in list order.
func sortNewestFirst(entries []indexEntry) {
	slices.SortFunc(entries, func(a, b indexEntry) int {
		if newer(a, b) {
			return -1
		}
		if newer(b, a) {
			return 1
		}
		return 0
	})
}

// newer reports whether a comes before b in a list: a higher score, or the same and a higher id.
func newer(a, b indexEntry) bool {
	if c := cmp.Compare(a.score, b.score); c != 0 {
		return c > 0
	}
	return a.id > b.id
}
