package engine

import (
	"encoding/json"
	"strings"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// Fair turns on fair, ordered dispatch for a task type: its jobs do not go into asynq's FIFO
// queue at enqueue, they wait in an admission layer in Redis (one list per key) and are admitted
// into asynq as the type's capacity frees, in weighted round-robin across keys and in enqueue
// order within a key. So a tenant's 10,000 queued jobs do not stand in front of another tenant's
// one, a key over its per-key limit waits without bouncing, and a Sequence runs one job of a key
// at a time, in order, across retries and worker deaths. See docs/FAIRNESS.md.
type Fair struct {
	// Key derives a job's fair key from its spec (nil: its tenant; "" becomes "-").
	Key func(Spec) string
	// Weights are the weights of named keys (default 1 for every other key): under contention a
	// key of weight 5 is admitted five times as often as one of weight 1; a key alone is admitted
	// as often as the capacity allows whatever its weight.
	Weights map[string]int
	// Capacity is the most jobs of the type admitted and not ended at once, across every process.
	// Default: the handlers of the live asynq servers that serve the type's queue, summed over the
	// workers, counted every 5 s by one worker's sweep (the enqueuing process's Concurrency until a
	// first count). Less than the handlers leaves handlers idle; more lets asynq's FIFO queue
	// hold the excess, where a newly admitted key waits behind it, but keeps the queue from running
	// dry between an end and the next admission (short jobs drain faster with a margin).
	Capacity int
	// Sequence runs the jobs of one key one at a time, in enqueue order: the next is admitted when
	// the previous has ended (retries, rescues and worker deaths keep its turn).
	Sequence bool
	// BlockOnFailure makes a sequence job that fails for good block its key until an operator
	// skips it (Stack.SkipBlocked); default false: the key's next job is admitted.
	BlockOnFailure bool
	// Batch is the most jobs one admission moves into asynq (default 64).
	Batch int
	// Shards spreads the type's admission state over n slots (default 1), for a type whose fair
	// jobs are more than one Redis Cluster master can admit (about 9,000 a second): each shard
	// admits its share of Capacity, and a key's jobs all wait in one shard (order, per-key limit
	// and rate stay exact), but a lone key gets only its shard's share and weights hold between
	// the keys of one shard. At most Capacity. Change it only while the type has no job waiting
	// or running: a key's jobs waiting in its old shard are not moved (see docs/FAIRNESS.md).
	Shards int
}

// defaultFairBatch bounds one admission script's run (a freed capacity of thousands admits in
// several calls, each short).
const defaultFairBatch = 64

// keyOf is spec's fair key.
func (f *Fair) keyOf(spec Spec) string {
	key := spec.Tenant
	if f.Key != nil {
		key = f.Key(spec)
	}
	if key == "" {
		return "-"
	}
	// The unit separator delimits an admission entry's parts (jobstore.FairEntry).
	return strings.ReplaceAll(key, "\x1f", "_")
}

// weightOf is key's weight.
func (f *Fair) weightOf(key string) int {
	if w := f.Weights[key]; w > 0 {
		return w
	}
	return 1
}

// fairPolicy is how shard sh of tc bounds its admissions: its share of the capacity, its per-key
// limit (1 for a sequence, else the type's Limit.Concurrency), its batch, and its Limit's rate per
// key: both limits are enforced here, before asynq, where a key over them waits without bouncing
// (the start's take still checks them, by the limit key, which is the fair key in the examples).
func (s *Stack) fairPolicy(tc TaskConfig, sh jobstore.FairShard) jobstore.FairPolicy {
	f, lim := tc.Fair, tc.Limit.withDefaults()
	p := jobstore.FairPolicy{Capacity: shardCapacity(s.fairCapacity(tc), sh), LiveCapacity: f.Capacity <= 0,
		PerKey: lim.Concurrency, Batch: f.Batch, Interval: lim.interval(), Tolerance: lim.tolerance()}
	if f.Sequence {
		p.PerKey = 1
	}
	if p.Batch <= 0 {
		p.Batch = defaultFairBatch
	}
	return p
}

// fairCapacity is tc's capacity over every shard: its own, or the stack's Concurrency, which
// stands in for the live handlers' count until a sweep has written one (fair_capacity.go).
func (s *Stack) fairCapacity(tc TaskConfig) int {
	if tc.Fair.Capacity > 0 {
		return tc.Fair.Capacity
	}
	return s.cfg.Concurrency
}

// fairDelivery is what an entry carries from the enqueue to the admission: what the delivery's
// headers say besides the job id (operation key, dedup, limit key, trace context) and when it is
// due (a ProcessIn, a debounce).
type fairDelivery struct {
	OpKey   string            `json:"o,omitempty"`
	Dedup   string            `json:"u,omitempty"`
	Headers map[string]string `json:"h,omitempty"`
	Due     int64             `json:"d,omitempty"` // unix ms
	// N is the delivery's number (0: the first); a replay's is past the first.
	N int `json:"n,omitempty"`
}

func encodeFairDelivery(d fairDelivery) string {
	if d.OpKey == "" && d.Dedup == "" && len(d.Headers) == 0 && d.Due == 0 && d.N == 0 {
		return "" // most entries: the job id alone (bytes per waiting job)
	}
	b, _ := json.Marshal(d)
	return string(b)
}

func decodeFairDelivery(data string) fairDelivery {
	var d fairDelivery
	if data != "" {
		_ = json.Unmarshal([]byte(data), &d) // written by encodeFairDelivery only
	}
	return d
}
