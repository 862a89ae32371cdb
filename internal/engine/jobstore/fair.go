package jobstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/keyslot"
)

// The admission layer of fairly dispatched types (engine/fair.go): jobs wait in per-key lists in
// Redis, and the type's scripts admit them into asynq in weighted round-robin over the keys, as
// capacity frees. Every key of one shard of a type shares a hash tag (one slot on a cluster), so
// each admission is one atomic script: two dispatchers never admit the same job. A type has one
// shard unless it is spread over several (FairShard), each with its own keys and its share of the
// capacity, on different masters of a cluster; a fair key lives in one shard.

// The scripts compose fair_admit.lua (the stride scheduler) with their own body. They need none
// of the job prelude: they write no job record (a wait and a done sent in a create's or a finish's
// pipeline read one field or two of it). A wait and a done, on every fair job's path, go
// through the store's batcher (RunScript), in the pipelines of the runs' own scripts.
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
	// Once: hash of the jobs in the keys' lists (job id -> key), so that a release decided twice
	// (a replay raced) does not put a job in its list twice, and a withdrawal counts only a job
	// still in its list; an entry leaves with its list entry (its admission, or the admission
	// passing over it withdrawn).
	Once string
	// Blocked: set of the admitted jobs that failed for good and block their sequence: they hold
	// their key (Running) but no place of the capacity, until an operator's skip frees them.
	Blocked string
	// Rate: sorted set of the keys whose rate still binds (key -> the next token's theoretical
	// arrival, unix ms in Redis's clock); Parked: sorted set of the keys held back until their
	// next token is due (key -> due, unix ms). Used by a type with a rate limit only.
	Rate, Parked string
	// Withdrawn: hash of the jobs that ended while they waited in their key's list (job id ->
	// key), off the backlog already; each leaves the hash when the admission passes over its
	// entry (fair_withdraw.go).
	Withdrawn string
	// Handlers: the handlers of the live asynq servers that serve the type, this shard's share, as
	// a sweep last counted them (FairSetHandlers); it expires when no sweep runs.
	Handlers string
	// WaitPrefix names each key's list of waiting entries: WaitPrefix + key.
	WaitPrefix string
	// Layouts: set of the shard counts the type was used with (fair_layouts.go); kept in the
	// unsharded slot only.
	Layouts string
}

// FairShard names shard Index of the Of shards of task type Type's admission state (Of <= 1: the
// type's one slot).
type FairShard struct {
	Type      string
	Index, Of int
}

// FairShards are the n shards of type typ.
func FairShards(typ string, n int) []FairShard {
	out := make([]FairShard, max(n, 1))
	for i := range out {
		out[i] = FairShard{Type: typ, Index: i, Of: n}
	}
	return out
}

// tag is the shard's hash tag: the type's own when it is not spread, else one whose slot lies in
// the shard's share of the slot space (keyslot.Spread), so a cluster's masters hold the shards in
// proportion to their slots.
func (sh FairShard) tag() string {
	base := ResourceTag("fair\x00" + sh.Type)
	if sh.Of <= 1 {
		return base
	}
	return keyslot.Spread(base, sh.Index, sh.Of)
}

// FairKeys returns the admission keys of one shard of a task type.
func (s *Store) FairKeys(sh FairShard) FairKeys {
	if k, ok := s.fairKeys.Load(sh); ok {
		return k.(FairKeys)
	}
	k := s.buildFairKeys(sh)
	s.fairKeys.Store(sh, k)
	return k
}

func (s *Store) buildFairKeys(sh FairShard) FairKeys {
	tag := sh.tag()
	k := func(name string) string { return s.locks.Key(tag, "fair:"+name) }
	return FairKeys{Ready: k("ready"), Backlog: k("backlog"), Running: k("running"), Admitted: k("admitted"),
		Weight: k("weight"), Pass: k("pass"), VTime: k("vtime"), Once: k("once"), Blocked: k("blocked"),
		Rate: k("rate"), Parked: k("parked"), Handlers: k("handlers"), Withdrawn: k("withdrawn"), WaitPrefix: k("wait:"), Layouts: k("layouts")}
}

func (k FairKeys) list() []string {
	return []string{k.Ready, k.Backlog, k.Running, k.Admitted, k.Weight, k.Pass, k.VTime, k.Once, k.Blocked, k.Rate, k.Parked, k.Handlers, k.Withdrawn}
}

// args are the first arguments of every admission script: the key lists' prefix and the rate.
func (k FairKeys) args(p FairPolicy, more ...any) []any {
	return append([]any{k.WaitPrefix, ms(p.Interval), ms(p.Tolerance)}, more...)
}

// FairPolicy is how one type admits: at most Capacity jobs admitted and not ended (0: no bound),
// at most PerKey of one key (0: no bound), at most Batch admitted by one call; with a rate
// (Interval > 0), each key's admissions spaced by Interval, Tolerance ((burst - 1) x Interval)
// allowing a burst. LiveCapacity makes the capacity the shard's count of live handlers
// (FairSetHandlers) while one is fresh, Capacity otherwise.
type FairPolicy struct {
	Capacity, PerKey, Batch int
	LiveCapacity            bool
	Interval, Tolerance     time.Duration
}

func (p FairPolicy) batch() int { return max(p.Batch, 1) }

// capacity is the scripts' capacity argument: a live one is sent negated (fair_capacity in
// fair_admit.lua).
func (p FairPolicy) capacity() int {
	if p.LiveCapacity && p.Capacity > 0 {
		return -p.Capacity
	}
	return p.Capacity
}

// FairClaimCount claims the next count of the live handlers for every process of the fleet, for
// every: one process in each period reads asynq's server list (with every active task's payload,
// so not a read for each process to make). It reports whether this one won the claim.
func (s *Store) FairClaimCount(ctx context.Context, every time.Duration) (bool, error) {
	ok, err := s.rdb.SetNX(ctx, s.FairCountClaimKey(), 1, every).Result()
	if err != nil {
		return false, fmt.Errorf("jobstore: claim the handlers' count: %w", err)
	}
	return ok, nil
}

// FairCountClaimKey is the key of FairClaimCount's claim.
func (s *Store) FairCountClaimKey() string { return s.locks.Key("fair", "handlers-count") }

// FairSetHandlers records n, shard sh's share of the handlers that serve its type, for ttl: the
// admissions of a policy with LiveCapacity use it until it expires.
func (s *Store) FairSetHandlers(ctx context.Context, sh FairShard, n int, ttl time.Duration) error {
	if err := s.rdb.Set(ctx, s.FairKeys(sh).Handlers, n, ttl).Err(); err != nil {
		return fmt.Errorf("jobstore: fair handlers %s: %w", sh.Type, err)
	}
	return nil
}

// FairEntry is one admitted job: its id, the key it waited for, and the delivery data the wait
// stored with it (opaque to the store).
type FairEntry struct {
	JobID, Key, Data string
	// Shard is the shard that admitted it.
	Shard FairShard
}

// entrySep separates an entry's job id from its delivery data (the ASCII unit separator: never
// in a job id).
const entrySep = "\x1f"

// FairWait puts job id at the end of key's list with data, and admits what the capacity allows.
// once makes a repeated wait of id do nothing while id waits or is admitted (a workflow node's
// release may be decided twice, a replay raced).
func (s *Store) FairWait(ctx context.Context, sh FairShard, key, id, data string, weight int, p FairPolicy, once bool) ([]FairEntry, error) {
	k := s.FairKeys(sh)
	entry := id
	if data != "" {
		entry += entrySep + data
	}
	res, err := s.RunScript(ctx, fairWaitScript, k.list(), k.args(p, key, entry, max(weight, 1), p.capacity(), p.PerKey,
		p.batch(), ms(s.cfg.Retention), boolArg(once))...).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: fair wait %s: %w", id, err)
	}
	return fairEntries("fair_wait", sh, res, 0)
}

// FairWaitCall is a FairWait sent in its job's create pipeline (CreateAndWait): the job waits in
// Shard's list of Key with Data, at Weight, admitted under Policy.
type FairWaitCall struct {
	Shard     FairShard
	Key, Data string
	Weight    int
	Policy    FairPolicy
}

// ConfirmWith is a confirmation sent in CreateAndWait's pipeline after the wait, where nothing can
// refuse the job between its create and its confirmation (no asynq enqueue comes between: the
// admission delivers the job later). Deadline is the caller's, in Redis's clock (WriteDeadline);
// Also queues what the confirmation's pipeline carries after it (the tenant's list, the expiry
// index): plain commands, queued again if the confirmation is sent again.
type ConfirmWith struct {
	MarkerTTL time.Duration
	Deadline  int64
	Also      func(ctx context.Context, pipe redis.Pipeliner)
}

// CreatedWaiting is CreateAndWait's answer: the create's (State, Existing), what the wait
// admitted (the caller's to deliver when Waited: the wait ran) and the confirmation sent with
// them (Confirmed nil: none was).
type CreatedWaiting struct {
	State     CreateState
	Existing  string
	Admitted  []FairEntry
	Waited    bool
	Confirmed *Confirmation
}

// CreateAndWait is Create of j followed by its FairWait in the same pipeline, and by its
// confirmation when c is not nil: one round trip for all, on one Redis node only (the caller's
// check: on a cluster they reach different masters in no order). The wait runs only if it finds
// j's record: a create that did not run before it (its script was missing, sent again after)
// leaves Waited false, and the caller waits on its own if the job was created. The confirmation
// confirms only a job that has waited (confirm.lua): one that ran before the create answers gone,
// one that ran before the wait answers unwaited (either sent again after it), and the caller then
// confirms on its own. A create that ran but is not answered Created (a client's retry of the
// pipeline after a lost reply answers Exists) leaves an entry of the wait's: the caller abandons
// the record unless a confirmation took, and the entry's admission then finds nothing to start
// and frees it.
func (s *Store) CreateAndWait(ctx context.Context, k Keys, j NewJob, w FairWaitCall, c *ConfirmWith) (CreatedWaiting, error) {
	ckeys, cargs := s.createCall(k, j)
	fk := s.FairKeys(w.Shard)
	entry := j.ID
	if w.Data != "" {
		entry += entrySep + w.Data
	}
	wkeys := append(fk.list(), k.Record)
	wargs := fk.args(w.Policy, w.Key, entry, max(w.Weight, 1), w.Policy.capacity(), w.Policy.PerKey, w.Policy.batch(), ms(s.cfg.Retention), boolArg(false))
	calls := []scriptCall{
		{createScript, func(ctx context.Context, c redis.Scripter) *redis.Cmd {
			return createScript.EvalSha(ctx, c, ckeys, cargs...)
		}},
		{fairWaitScript, func(ctx context.Context, c redis.Scripter) *redis.Cmd {
			return fairWaitScript.EvalSha(ctx, c, wkeys, wargs...)
		}},
	}
	if c != nil {
		calls = append(calls, s.confirmCall(k, fk, j.ID, *c))
	}
	cmds := s.creates.run(ctx, calls)
	var out CreatedWaiting
	var err error
	out.State, out.Existing, err = parseCreate(cmds[0].Result())
	if c != nil {
		out.Confirmed = &Confirmation{cmd: cmds[2]}
	}
	res, werr := cmds[1].Result()
	if n, ok := res.(int64); werr != nil || (ok && n == -1) {
		return out, err // not waited: the caller waits on its own
	}
	admitted, aerr := fairEntries("fair_wait", w.Shard, res, 0)
	if err == nil {
		err = aerr
	}
	// Waited even when the create's answer was lost: what the wait admitted is the caller's to deliver.
	out.Admitted, out.Waited = admitted, aerr == nil
	return out, err
}

// confirmCall is c's confirmation of job id as a call of a batch, with what c.Also queues after it;
// it confirms only a job that waits or is admitted in fk's shard (confirm.lua: KEYS[5], KEYS[6]).
func (s *Store) confirmCall(k Keys, fk FairKeys, id string, c ConfirmWith) scriptCall {
	keys := []string{k.Marker, k.Pending, k.Record, k.Timeline, fk.Once, fk.Admitted}
	args := []any{id, ms(c.MarkerTTL), c.Deadline, ms(s.cfg.Retention)}
	return scriptCall{confirmScript, func(ctx context.Context, sc redis.Scripter) *redis.Cmd {
		cmd := confirmScript.EvalSha(ctx, sc, keys, args...)
		if pipe, ok := sc.(redis.Pipeliner); ok && c.Also != nil {
			c.Also(ctx, pipe)
		}
		return cmd
	}}
}

// FairDone frees the admissions of the ended jobs ids in one call (each once: it reports how
// many this call freed), and admits what the freed capacity allows.
func (s *Store) FairDone(ctx context.Context, sh FairShard, ids []string, p FairPolicy) (int, []FairEntry, error) {
	if len(ids) == 0 {
		return 0, nil, nil
	}
	k := s.FairKeys(sh)
	args := make([]any, 0, 7+len(ids))
	args = append(args, k.args(p, p.capacity(), p.PerKey, p.batch(), ms(s.cfg.Retention))...)
	for _, id := range ids {
		args = append(args, id)
	}
	res, err := s.RunScript(ctx, fairDoneScript, k.list(), args...).Result()
	if err != nil {
		return 0, nil, fmt.Errorf("jobstore: fair done %s (%d jobs): %w", sh.Type, len(ids), err)
	}
	return parseFairDone(sh, res)
}

// parseFairDone reads a fair_done reply of shard sh: how many it freed, and what it admitted.
func parseFairDone(sh FairShard, res any) (int, []FairEntry, error) {
	list, ok := res.([]any)
	if !ok || len(list) == 0 {
		return 0, nil, replyError("fair_done", res)
	}
	freed, ok := list[0].(int64)
	if !ok {
		return 0, nil, replyError("fair_done", res)
	}
	entries, err := fairEntries("fair_done", sh, list, 1)
	return int(freed), entries, err
}

// FairDoneCall is the FairDone of a finishing job sent in its finish's pipeline (Finish): its
// admission in Shard is freed, and what that allows admitted under Policy, if its record then
// holds Status and the finish's time as finished_at, which that finish writes. On one Redis node
// only (the caller's check: the script reads the record, in another slot than the admission keys).
type FairDoneCall struct {
	Shard  FairShard
	Policy FairPolicy
	Status Status
}

// FairDoneAnswer is what a FairDoneCall did: Freed is 0 when the job held no admission or its
// record did not hold the status (a finish refused or not run before it), Err set when the call
// failed; either way the caller frees the admission on its other path.
type FairDoneAnswer struct {
	Freed    int
	Admitted []FairEntry
	Err      error
}

// call is c as one script call of the pipeline of job id (whose record is record) finishing at now.
func (c FairDoneCall) call(s *Store, record, id string, now time.Time) scriptCall {
	k := s.FairKeys(c.Shard)
	keys := append(k.list(), record)
	args := k.args(c.Policy, c.Policy.capacity(), c.Policy.PerKey, c.Policy.batch(), ms(s.cfg.Retention), string(c.Status), now.UnixMilli(), id)
	return scriptCall{fairDoneScript, func(ctx context.Context, r redis.Scripter) *redis.Cmd {
		return fairDoneScript.EvalSha(ctx, r, keys, args...)
	}}
}

// answer reads cmd, the reply of c's call.
func (c FairDoneCall) answer(cmd *redis.Cmd) FairDoneAnswer {
	res, err := cmd.Result()
	if err != nil {
		return FairDoneAnswer{Err: fmt.Errorf("jobstore: fair done %s: %w", c.Shard.Type, err)}
	}
	freed, admitted, err := parseFairDone(c.Shard, res)
	return FairDoneAnswer{Freed: freed, Admitted: admitted, Err: err}
}

// FairBlock marks admitted job id as blocking its sequence: it keeps its key, gives its place of
// the capacity back, and what that place allows is admitted.
func (s *Store) FairBlock(ctx context.Context, sh FairShard, id string, p FairPolicy) ([]FairEntry, error) {
	k := s.FairKeys(sh)
	res, err := fairBlockScript.Run(ctx, s.rdb, k.list(), k.args(p, p.capacity(), p.PerKey, p.batch(),
		ms(s.cfg.Retention), id)...).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: fair block %s: %w", id, err)
	}
	return fairEntries("fair_block", sh, res, 0)
}

// FairUnblock takes job id out of the blocked set, so that it counts against the type's capacity
// again: a replay of a job that blocks its sequence runs in its place.
func (s *Store) FairUnblock(ctx context.Context, sh FairShard, id string) error {
	if err := s.rdb.SRem(ctx, s.FairKeys(sh).Blocked, id).Err(); err != nil {
		return fmt.Errorf("jobstore: fair unblock %s: %w", id, err)
	}
	return nil
}

// FairPump admits what the type's capacity allows.
//
// more is true when the call passed over as many withdrawn entries as one call may (fair_pop in
// fair_admit.lua) and stopped with entries left: another call goes on.
func (s *Store) FairPump(ctx context.Context, sh FairShard, p FairPolicy) (admitted []FairEntry, more bool, err error) {
	k := s.FairKeys(sh)
	res, err := fairPumpScript.Run(ctx, s.rdb, k.list(), k.args(p, p.capacity(), p.PerKey, p.batch(),
		ms(s.cfg.Retention))...).Result()
	if err != nil {
		return nil, false, fmt.Errorf("jobstore: fair pump %s: %w", sh.Type, err)
	}
	list, ok := res.([]any)
	if !ok || len(list) == 0 {
		return nil, false, replyError("fair_pump", res)
	}
	more = list[0] == int64(1)
	admitted, err = fairEntries("fair_pump", sh, res, 1)
	return admitted, more, err
}

// FairNextDue is when the type's first parked key's next token is due (unix ms in Redis's clock),
// and false when no key is parked.
func (s *Store) FairNextDue(ctx context.Context, sh FairShard) (int64, bool, error) {
	z, err := s.rdb.ZRangeWithScores(ctx, s.FairKeys(sh).Parked, 0, 0).Result()
	if err != nil {
		return 0, false, fmt.Errorf("jobstore: fair next due %s: %w", sh.Type, err)
	}
	if len(z) == 0 {
		return 0, false, nil
	}
	return int64(z[0].Score), true, nil
}

// fairEntries reads the {entry, key, ...} pairs of a reply of shard sh from index from.
func fairEntries(script string, sh FairShard, res any, from int) ([]FairEntry, error) {
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
		out = append(out, FairEntry{JobID: id, Key: key, Data: data, Shard: sh})
	}
	return out, nil
}

// FairAdmittedJobs lists the type's admitted jobs that have not ended.
func (s *Store) FairAdmittedJobs(ctx context.Context, sh FairShard) ([]FairEntry, error) {
	m, err := s.rdb.HGetAll(ctx, s.FairKeys(sh).Admitted).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: fair admitted %s: %w", sh.Type, err)
	}
	out := make([]FairEntry, 0, len(m))
	for id, held := range m {
		key, data, _ := strings.Cut(held, entrySep)
		out = append(out, FairEntry{JobID: id, Key: key, Data: data, Shard: sh})
	}
	return out, nil
}

// FairHolds reports whether job id holds an admission of type typ (admitted and not freed).
func (s *Store) FairHolds(ctx context.Context, sh FairShard, id string) (bool, error) {
	ok, err := s.rdb.HExists(ctx, s.FairKeys(sh).Admitted, id).Result()
	if err != nil {
		return false, fmt.Errorf("jobstore: fair holds %s: %w", id, err)
	}
	return ok, nil
}

// FairRecord is what the sweep reads of an admitted job's record.
type FairRecord struct {
	Status Status // "" for a record that is gone
	// Deliveries numbers the job's current delivery (DeliveryID): a rescue or a replay moves it
	// past the one its admission carries.
	Deliveries int
	// CancelledRun is when a cancel took the job's running run (FieldCancelledRun; zero: none).
	CancelledRun time.Time
}

// FairRecords reads the status, delivery number and cancelled run of jobs ids (status "" for a
// record that is gone, or an id that names none), in one round trip.
func (s *Store) FairRecords(ctx context.Context, ids []string) ([]FairRecord, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(ids))
	for i, id := range ids {
		if k, err := s.Keys(id, ""); err == nil {
			cmds[i] = pipe.HMGet(ctx, k.Record, FieldStatus, FieldDeliveries, FieldCancelledRun)
		}
	}
	out := make([]FairRecord, len(ids))
	if pipe.Len() == 0 {
		return out, nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("jobstore: fair records: %w", err)
	}
	for i, c := range cmds {
		if c == nil {
			continue
		}
		v := c.Val()
		status, _ := v[0].(string)
		deliveries, _ := v[1].(string)
		out[i] = FairRecord{Status: Status(status), Deliveries: 1}
		if n, err := strconv.Atoi(deliveries); err == nil && n > 1 {
			out[i].Deliveries = n // absent in a compacted record: 1
		}
		if cancelled, _ := v[2].(string); cancelled != "" {
			if ms, err := strconv.ParseInt(cancelled, 10, 64); err == nil {
				out[i].CancelledRun = time.UnixMilli(ms)
			}
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
