package engine

import (
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// A fair type's admission state is one slot: every admission of the type is a script there, so on
// a Redis Cluster one master takes all of them (about 9,000 fair jobs/s of one type). Fair.Shards
// spreads it: shard i has its own keys on the i-th share of the slot space, and its own share of
// the capacity; a fair key's jobs all wait in one shard (its hash), so a key's order, its per-key
// limit and its rate stay exact. What a shard admits is bounded by its share alone: a lone key
// gets its shard's share of the capacity, and weights hold between keys of one shard.
//
// An admitted delivery names its shard (HeaderFairShard), so its end frees its admission in that
// shard alone. An end that does not know it (a cancel of a job not running, a delivery made by a
// rescue, whose headers are rebuilt from the record) asks every shard: a shard that does not hold
// the job frees nothing. When the shard count changed, the sweep visits the old layout's shards
// too (jobstore/fair_layouts.go) until they are empty: their keys' jobs are admitted there, their
// ends freed there, so for a while the type may run up to both layouts' capacities.

// HeaderFairShard is the header of an admitted delivery of a type spread over several shards:
// "<index>/<shards>" of the shard that admitted it ("0/1" for a replay that runs in the place of
// its blocked admission in a layout of one shard, while the type has several now).
const HeaderFairShard = "jobguard-fair-shard"

// maxFairShardsRead bounds the shard count a delivery's header may name.
const maxFairShardsRead = 1024

// fairShards is how many shards tc's admission state has: Fair.Shards, at least 1 and at most the
// capacity (each shard admits at least one job at a time).
func (s *Stack) fairShards(tc TaskConfig) int {
	return min(max(tc.Fair.Shards, 1), s.fairCapacity(tc))
}

// fairShardsOf are every shard of tc.
func (s *Stack) fairShardsOf(tc TaskConfig) []jobstore.FairShard {
	return jobstore.FairShards(tc.Type, s.fairShards(tc))
}

// fairShardOf is the shard key's jobs wait in.
func (s *Stack) fairShardOf(tc TaskConfig, key string) jobstore.FairShard {
	return fairShardIn(tc.Type, key, s.fairShards(tc))
}

// fairShardIn is the shard key's jobs of type typ wait in when the type has n shards.
func fairShardIn(typ, key string, n int) jobstore.FairShard {
	if n <= 1 {
		return jobstore.FairShard{Type: typ, Of: 1}
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return jobstore.FairShard{Type: typ, Index: int(h.Sum32() % uint32(n)), Of: n}
}

// fairShardOfDelivery is the shard that admitted the delivery with headers h, and false when the
// delivery does not say (then any shard may hold its admission).
func (s *Stack) fairShardOfDelivery(tc TaskConfig, h map[string]string) (jobstore.FairShard, bool) {
	if sh, ok := parseFairShard(tc.Type, h[HeaderFairShard]); ok {
		return sh, true // its layout's, even if the shard count changed since
	}
	if s.fairShards(tc) <= 1 {
		return jobstore.FairShard{Type: tc.Type, Of: 1}, true
	}
	return jobstore.FairShard{}, false
}

// fairShardHeader is HeaderFairShard's value for shard sh.
func fairShardHeader(sh jobstore.FairShard) string {
	return strconv.Itoa(sh.Index) + "/" + strconv.Itoa(sh.Of)
}

// parseFairShard reads a HeaderFairShard value of type typ; false when it names no shard.
func parseFairShard(typ, v string) (jobstore.FairShard, bool) {
	i, n, ok := strings.Cut(v, "/")
	index, err1 := strconv.Atoi(i)
	of, err2 := strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil || of < 1 || of > maxFairShardsRead || index < 0 || index >= of {
		return jobstore.FairShard{}, false
	}
	return jobstore.FairShard{Type: typ, Index: index, Of: of}, true
}

// shardCapacity is shard sh's share of capacity: the capacity split as evenly as it divides, at
// least 1 (a policy's 0 is no bound; an old layout may have more shards than the capacity).
func shardCapacity(capacity int, sh jobstore.FairShard) int {
	if sh.Of <= 1 || capacity <= 0 {
		return capacity
	}
	c := capacity / sh.Of
	if sh.Index < capacity%sh.Of {
		c++
	}
	return max(c, 1)
}

// withHeader is a copy of h with k set to v (h may be shared).
func withHeader(h map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(h)+1)
	for hk, hv := range h {
		out[hk] = hv
	}
	out[k] = v
	return out
}
