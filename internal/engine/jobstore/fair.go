package jobstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The admission layer of fairly dispatched types (engine/fair.go): jobs wait in per-key lists in
// Redis, and the type's scripts admit them into asynq in weighted round-robin over the keys, as
// capacity frees. Every key of one type shares a hash tag (one slot on a cluster), so each
// admission is one atomic script: two dispatchers never admit the same job.

// The scripts compose fair_admit.lua (the stride scheduler) with their own body. They need none
// of the job prelude: they touch no job record.
var (
	fairAdmit       = scripts.Read("fair_admit.lua")
	fairWaitScript  = redis.NewScript(fairAdmit + "\n" + scripts.Read("fair_wait.lua"))
	fairDoneScript  = redis.NewScript(fairAdmit + "\n" + scripts.Read("fair_done.lua"))
	fairPumpScript  = redis.NewScript(fairAdmit + "\n" + scripts.Read("fair_pump.lua"))
	fairBlockScript = redis.NewScript(fairAdmit + "\n" + scripts.Read("fair_block.lua"))
)

// FairKeys are the admission keys of one task type, all in one slot.
type FairKeys struct {
	// Ready: sorted set of the keys that may be admitted now, by pass (the stride scheduler's).
	Ready string
	// Backlog and Running: sorted sets of each key's waiting and admitted-not-ended counts (the
	// top keys for metrics and the API); a key at zero is removed.
	Backlog, Running string
	// Admitted: hash of the admitted jobs that have not ended (job id -> key, \x1f, delivery
	// data); its length is what the type's capacity bounds.
	Admitted string
	// Weight: hash of the keys' weights other than 1; Pass: hash of each key's next pass; both
	// forget a key once it is idle.
	Weight, Pass string
	// VTime: the pass of the last admission (expires with the retention when the type is idle).
	VTime string
	// Once: hash of the workflow nodes and replays waiting (job id -> key), so that a release
	// decided twice (a replay raced) does not put a job in its list twice; an entry leaves at its
	// admission.
	Once string
	// Blocked: set of the admitted jobs that failed for good and block their sequence: they hold
	// their key (Running) but no place of the capacity, until an operator's skip frees them.
	Blocked string
	// Rate: sorted set of the keys whose rate still binds (key -> the next token's theoretical
	// arrival, unix ms in Redis's clock); Parked: sorted set of the keys held back until their
	// next token is due (key -> due, unix ms). Used by a type with a rate limit only.
	Rate, Parked string
	// WaitPrefix names each key's list of waiting entries: WaitPrefix + key.
	WaitPrefix string
}

// FairKeys returns the admission keys of task type typ.
func (s *Store) FairKeys(typ string) FairKeys {
	tag := ResourceTag("fair\x00" + typ)
	k := func(name string) string { return s.locks.Key(tag, "fair:"+name) }
	return FairKeys{Ready: k("ready"), Backlog: k("backlog"), Running: k("running"), Admitted: k("admitted"),
		Weight: k("weight"), Pass: k("pass"), VTime: k("vtime"), Once: k("once"), Blocked: k("blocked"),
		Rate: k("rate"), Parked: k("parked"), WaitPrefix: k("wait:")}
}

func (k FairKeys) list() []string {
	return []string{k.Ready, k.Backlog, k.Running, k.Admitted, k.Weight, k.Pass, k.VTime, k.Once, k.Blocked, k.Rate, k.Parked}
}

// args are the first arguments of every admission script: the key lists' prefix and the rate.
func (k FairKeys) args(p FairPolicy, more ...any) []any {
	return append([]any{k.WaitPrefix, ms(p.Interval), ms(p.Tolerance)}, more...)
}

// FairPolicy is how one type admits: at most Capacity jobs admitted and not ended (0: no bound),
// at most PerKey of one key (0: no bound), at most Batch admitted by one call; with a rate
// (Interval > 0), each key's admissions spaced by Interval, Tolerance ((burst - 1) x Interval)
// allowing a burst.
type FairPolicy struct {
	Capacity, PerKey, Batch int
	Interval, Tolerance     time.Duration
}

func (p FairPolicy) batch() int { return max(p.Batch, 1) }

// FairEntry is one admitted job: its id, the key it waited for, and the delivery data the wait
// stored with it (opaque to the store).
type FairEntry struct {
	JobID, Key, Data string
}

// entrySep separates an entry's job id from its delivery data (the ASCII unit separator: never
// in a job id).
const entrySep = "\x1f"

// FairWait puts job id at the end of key's list with data, and admits what the capacity allows.
// once makes a repeated wait of id do nothing while id waits or is admitted (a workflow node's
// release may be decided twice, a replay raced).
func (s *Store) FairWait(ctx context.Context, typ, key, id, data string, weight int, p FairPolicy, once bool) ([]FairEntry, error) {
	k := s.FairKeys(typ)
	entry := id
	if data != "" {
		entry += entrySep + data
	}
	res, err := fairWaitScript.Run(ctx, s.rdb, k.list(), k.args(p, key, entry, max(weight, 1), p.Capacity, p.PerKey,
		p.batch(), ms(s.cfg.Retention), boolArg(once))...).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: fair wait %s: %w", id, err)
	}
	return fairEntries("fair_wait", res, 0)
}

// FairDone frees the admissions of the ended jobs ids in one call (each once: it reports how
// many this call freed), and admits what the freed capacity allows.
func (s *Store) FairDone(ctx context.Context, typ string, ids []string, p FairPolicy) (int, []FairEntry, error) {
	if len(ids) == 0 {
		return 0, nil, nil
	}
	k := s.FairKeys(typ)
	args := make([]any, 0, 7+len(ids))
	args = append(args, k.args(p, p.Capacity, p.PerKey, p.batch(), ms(s.cfg.Retention))...)
	for _, id := range ids {
		args = append(args, id)
	}
	res, err := fairDoneScript.Run(ctx, s.rdb, k.list(), args...).Result()
	if err != nil {
		return 0, nil, fmt.Errorf("jobstore: fair done %s (%d jobs): %w", typ, len(ids), err)
	}
	list, ok := res.([]any)
	if !ok || len(list) == 0 {
		return 0, nil, replyError("fair_done", res)
	}
	freed, ok := list[0].(int64)
	if !ok {
		return 0, nil, replyError("fair_done", res)
	}
	entries, err := fairEntries("fair_done", list, 1)
	return int(freed), entries, err
}

// FairBlock marks admitted job id as blocking its sequence: it keeps its key, gives its place of
// the capacity back, and what that place allows is admitted.
func (s *Store) FairBlock(ctx context.Context, typ, id string, p FairPolicy) ([]FairEntry, error) {
	k := s.FairKeys(typ)
	res, err := fairBlockScript.Run(ctx, s.rdb, k.list(), k.args(p, p.Capacity, p.PerKey, p.batch(),
		ms(s.cfg.Retention), id)...).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: fair block %s: %w", id, err)
	}
	return fairEntries("fair_block", res, 0)
}

// FairUnblock takes job id out of the blocked set, so that it counts against the type's capacity
// again: a replay of a job that blocks its sequence runs in its place.
func (s *Store) FairUnblock(ctx context.Context, typ, id string) error {
	if err := s.rdb.SRem(ctx, s.FairKeys(typ).Blocked, id).Err(); err != nil {
		return fmt.Errorf("jobstore: fair unblock %s: %w", id, err)
	}
	return nil
}

// FairPump admits what the type's capacity allows.
func (s *Store) FairPump(ctx context.Context, typ string, p FairPolicy) ([]FairEntry, error) {
	k := s.FairKeys(typ)
	res, err := fairPumpScript.Run(ctx, s.rdb, k.list(), k.args(p, p.Capacity, p.PerKey, p.batch(),
		ms(s.cfg.Retention))...).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: fair pump %s: %w", typ, err)
	}
	return fairEntries("fair_pump", res, 0)
}

// FairNextDue is when the type's first parked key's next token is due (unix ms in Redis's clock),
// and false when no key is parked.
func (s *Store) FairNextDue(ctx context.Context, typ string) (int64, bool, error) {
	z, err := s.rdb.ZRangeWithScores(ctx, s.FairKeys(typ).Parked, 0, 0).Result()
	if err != nil {
		return 0, false, fmt.Errorf("jobstore: fair next due %s: %w", typ, err)
	}
	if len(z) == 0 {
		return 0, false, nil
	}
	return int64(z[0].Score), true, nil
}

// fairEntries reads the {entry, key, ...} pairs of a reply from index from.
func fairEntries(script string, res any, from int) ([]FairEntry, error) {
	list, ok := res.([]any)
	if !ok || len(list) < from || (len(list)-from)%2 != 0 {
		return nil, replyError(script, res)
	}
	out := make([]FairEntry, 0, (len(list)-from)/2)
	for i := from; i < len(list); i += 2 {
		entry, ok1 := list[i].(string)
		key, ok2 := list[i+1].(string)
		if !ok1 || !ok2 {
			return nil, replyError(script, res)
		}
		id, data, _ := strings.Cut(entry, entrySep)
		out = append(out, FairEntry{JobID: id, Key: key, Data: data})
	}
	return out, nil
}

// FairAdmittedJobs lists the type's admitted jobs that have not ended.
func (s *Store) FairAdmittedJobs(ctx context.Context, typ string) ([]FairEntry, error) {
	m, err := s.rdb.HGetAll(ctx, s.FairKeys(typ).Admitted).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: fair admitted %s: %w", typ, err)
	}
	out := make([]FairEntry, 0, len(m))
	for id, held := range m {
		key, data, _ := strings.Cut(held, entrySep)
		out = append(out, FairEntry{JobID: id, Key: key, Data: data})
	}
	return out, nil
}

// FairKeyCount is one key's waiting (Backlog) and admitted-not-ended (Running) jobs.
type FairKeyCount struct {
	Key              string
	Backlog, Running int64
}

// FairTop is the type's totals and its top keys by backlog and by running jobs (at most top of
// each, merged), for metrics and the API: bounded whatever the number of keys.
type FairTop struct {
	// WaitingKeys have jobs waiting; RunningKeys have jobs admitted and not ended; ReadyKeys may
	// be admitted now (the others wait for capacity, or are at their per-key limit).
	WaitingKeys, RunningKeys, ReadyKeys int64
	// Admitted is how many jobs are admitted and not ended (what the capacity bounds).
	Admitted int64
	TopKeys  []FairKeyCount
}

// FairCounts reads the type's totals and its top keys, in one round trip plus one for the
// counts of the keys it names.
func (s *Store) FairCounts(ctx context.Context, typ string, top int) (FairTop, error) {
	k := s.FairKeys(typ)
	pipe := s.rdb.Pipeline()
	keys := pipe.ZCard(ctx, k.Backlog)
	admitted := pipe.HLen(ctx, k.Admitted)
	ready := pipe.ZCard(ctx, k.Ready)
	running := pipe.ZCard(ctx, k.Running)
	if top <= 0 {
		// No key named: ZREVRANGE 0 -1 would name them all.
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return FairTop{}, fmt.Errorf("jobstore: fair counts %s: %w", typ, err)
		}
		return FairTop{WaitingKeys: keys.Val(), Admitted: admitted.Val(), ReadyKeys: ready.Val(), RunningKeys: running.Val()}, nil
	}
	byBacklog := pipe.ZRevRangeWithScores(ctx, k.Backlog, 0, int64(top-1))
	byRunning := pipe.ZRevRangeWithScores(ctx, k.Running, 0, int64(top-1))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return FairTop{}, fmt.Errorf("jobstore: fair counts %s: %w", typ, err)
	}
	out := FairTop{WaitingKeys: keys.Val(), Admitted: admitted.Val(), ReadyKeys: ready.Val(), RunningKeys: running.Val()}
	seen := map[string]int{}
	add := func(key string) int {
		if i, ok := seen[key]; ok {
			return i
		}
		seen[key] = len(out.TopKeys)
		out.TopKeys = append(out.TopKeys, FairKeyCount{Key: key})
		return len(out.TopKeys) - 1
	}
	for _, z := range byBacklog.Val() {
		out.TopKeys[add(z.Member.(string))].Backlog = int64(z.Score)
	}
	for _, z := range byRunning.Val() {
		out.TopKeys[add(z.Member.(string))].Running = int64(z.Score)
	}
	// Each named key's other count.
	pipe = s.rdb.Pipeline()
	backlogs := make([]*redis.FloatCmd, len(out.TopKeys))
	runnings := make([]*redis.FloatCmd, len(out.TopKeys))
	for i, c := range out.TopKeys {
		backlogs[i] = pipe.ZScore(ctx, k.Backlog, c.Key)
		runnings[i] = pipe.ZScore(ctx, k.Running, c.Key)
	}
	if len(out.TopKeys) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return FairTop{}, fmt.Errorf("jobstore: fair counts %s: %w", typ, err)
		}
	}
	for i := range out.TopKeys {
		out.TopKeys[i].Backlog, out.TopKeys[i].Running = int64(backlogs[i].Val()), int64(runnings[i].Val())
	}
	return out, nil
}

// FairHolds reports whether job id holds an admission of type typ (admitted and not freed).
func (s *Store) FairHolds(ctx context.Context, typ, id string) (bool, error) {
	ok, err := s.rdb.HExists(ctx, s.FairKeys(typ).Admitted, id).Result()
	if err != nil {
		return false, fmt.Errorf("jobstore: fair holds %s: %w", id, err)
	}
	return ok, nil
}

// FairKeyCounts reads one key's waiting and admitted-not-ended jobs (zero for a key unknown or
// idle), in one round trip: what a tenant may see of a type shared with other tenants.
func (s *Store) FairKeyCounts(ctx context.Context, typ, key string) (FairKeyCount, error) {
	k := s.FairKeys(typ)
	pipe := s.rdb.Pipeline()
	backlog := pipe.ZScore(ctx, k.Backlog, key)
	running := pipe.ZScore(ctx, k.Running, key)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return FairKeyCount{}, fmt.Errorf("jobstore: fair counts %s: %w", typ, err)
	}
	return FairKeyCount{Key: key, Backlog: int64(backlog.Val()), Running: int64(running.Val())}, nil
}

// FairStatuses reads the statuses of jobs ids ("" for a record that is gone, or an id that names
// none), in one round trip.
func (s *Store) FairStatuses(ctx context.Context, ids []string) ([]Status, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		if k, err := s.Keys(id, ""); err == nil {
			cmds[i] = pipe.HGet(ctx, k.Record, FieldStatus)
		}
	}
	if pipe.Len() == 0 {
		return make([]Status, len(ids)), nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("jobstore: fair statuses: %w", err)
	}
	out := make([]Status, len(ids))
	for i, c := range cmds {
		if c != nil {
			out[i] = Status(c.Val())
		}
	}
	return out, nil
}

// boolArg is a script's flag argument: "1" or "0".
func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
