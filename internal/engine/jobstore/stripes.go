package jobstore

import (
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/keyslot"
)

// The indexes every job is written to (the expiry index, the index of all jobs, a tenant's
// index and their tags') would each be one key in one slot: on Redis Cluster one master would
// take a write of every job. So on a cluster each is split into stripes, one key each, spread
// over the slot space (keyslot.Spread: as many on a master as the share of slots it serves). A
// job's entries go to stripe StripeOf(its resource tag), so one job's entries share a slot and a
// tag's index still sits beside its tenant's; readers merge the stripes. The unstriped key (the
// layout of one Redis, and of a cluster before striping) is read too, so its entries are swept and
// listed until it expires within a retention of its last write.

// clusterStripes is the stripe count on a cluster: enough that 3 to 16 masters each hold a share
// of them within about 1.2x the mean.
const clusterStripes = 48

// Stripes is how many stripes the store's indexes have (1: unstriped).
func (s *Store) Stripes() int { return s.stripes }

// resolveStripes is cfg's IndexStripes, or the default for the client: clusterStripes on a
// cluster, 1 otherwise.
func resolveStripes(rdb redis.UniversalClient, n int) int {
	if n > 0 {
		return n
	}
	if _, cluster := rdb.(*redis.ClusterClient); cluster {
		return clusterStripes
	}
	return 1
}

// StripeOf is which of n stripes (or shards) the entries of resource tag tag (16 hex digits,
// ResourceTag) go to: the tag's first 8 hex digits modulo n, so resources spread evenly and never
// move while n stays.
func StripeOf(tag string, n int) int {
	if n <= 1 || len(tag) < 8 {
		return 0
	}
	v, err := strconv.ParseUint(tag[:8], 16, 32)
	if err != nil {
		return 0
	}
	return int(v % uint64(n))
}

// stripeOfID is the stripe of job id's index entries.
func (s *Store) stripeOfID(id string) int {
	if s.stripes <= 1 || len(id) < 16 {
		return 0
	}
	return StripeOf(id[:16], s.stripes)
}

// stripeTag is the hash tag of stripe i of the index whose unstriped tag is base.
func (s *Store) stripeTag(base string, i int) string {
	if s.stripes <= 1 {
		return base
	}
	return keyslot.Spread(base, i, s.stripes)
}

// stripeTags are the hash tags a reader of the index base merges: the unstriped one, then each
// stripe's.
func (s *Store) stripeTags(base string) []string {
	tags := []string{base}
	if s.stripes > 1 {
		for i := range s.stripes {
			tags = append(tags, keyslot.Spread(base, i, s.stripes))
		}
	}
	return tags
}
