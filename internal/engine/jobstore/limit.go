package jobstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/locking"
)

// A key's limit (a task type's concurrency and rate per key) lives in the key's own slot, not the
// job's: jobs of one key sit on many resources. So its scripts are round trips of their own: the
// take before the start script, the release in the finish script's pipeline, renewals batched.

// They need none of the job prelude: the take draws its tokens through locking's protocol, and
// renew and release stand alone (a script's fragments are run at each call: about 20,000 of
// Redis's instructions for the protocol and prelude, measured with callgrind).
var (
	limitTakeScript    = locking.NewProtocolScript(scripts.Read("limit_take.lua"))
	limitRenewScript   = redis.NewScript(scripts.Read("limit_renew.lua"))
	limitReleaseScript = redis.NewScript(scripts.Read("limit_release.lua"))
)

// LimitKeys are the keys of one limit key, all in its slot.
type LimitKeys struct {
	Holders, Fence, Arrival string
}

// LimitKeys returns the keys of key's limit of task type typ.
func (s *Store) LimitKeys(typ, key string) LimitKeys { return LimitKeysOf(s.locks, typ, key) }

// LimitKeysOf is LimitKeys for the keys of locks (its prefix), without a store.
func LimitKeysOf(locks *locking.Client, typ, key string) LimitKeys {
	tag := ResourceTag("limit\x00" + typ + "\x00" + key)
	return LimitKeys{
		Holders: locks.Key(tag, "limit:holders"),
		Fence:   locks.Key(tag, "limit:fence"),
		Arrival: locks.Key(tag, "limit:tat"),
	}
}

// LimitArgs are one take of a limit.
type LimitArgs struct {
	Owner string
	// SlotTTL is how long a slot is held without a renewal.
	SlotTTL time.Duration
	// Concurrency is the most holders at once (0: no concurrency limit).
	Concurrency int
	// Interval is the rate's emission interval, period / rate (0: no rate limit); Tolerance its
	// burst tolerance, (burst - 1) * Interval.
	Interval, Tolerance time.Duration
	// MaxWait is the longest the caller waits for a start of the rate: a start within it is
	// reserved (Take.Wait says how long to wait), a later one answered RateWait.
	MaxWait time.Duration
}

// TakeState is what limit_take decided.
type TakeState string

// The take states.
const (
	// Taken: the slot is the owner's (Token, Held) and its start reserved At, Wait from now.
	Taken TakeState = "ok"
	// Full: every slot is held (Held); the earliest expires in Wait at the latest.
	Full TakeState = "full"
	// RateWait: a start conforms to the key's rate in Wait.
	RateWait TakeState = "rate"
)

// Take is limit_take's answer.
type Take struct {
	State TakeState
	Token int64
	Held  int
	Wait  time.Duration
	// At is the reserved start (Taken), in Redis's clock.
	At time.Time
}

// TakeLimit takes a slot of a key's limit (and a start of its rate), in one round trip.
func (s *Store) TakeLimit(ctx context.Context, k LimitKeys, a LimitArgs) (Take, error) {
	res, err := s.batch.run(ctx, []scriptCall{{limitTakeScript, func(ctx context.Context, c redis.Scripter) *redis.Cmd {
		return limitTakeScript.EvalSha(ctx, c, []string{k.Holders, k.Fence, k.Arrival}, s.takeArgs(a)...)
	}}})[0].Result()
	if err != nil {
		return Take{}, fmt.Errorf("jobstore: limit take: %w", err)
	}
	return parseTake(res)
}

func (s *Store) takeArgs(a LimitArgs) []any {
	return []any{a.Owner, ms(a.SlotTTL), a.Concurrency, ms(a.Interval), ms(a.Tolerance), ms(s.cfg.Retention), ms(a.MaxWait)}
}

// TakeStart is what TakeAndStart's two scripts answered, each with its own error.
type TakeStart struct {
	Take     Take
	TakeErr  error
	Started  Started
	StartErr error
}

// TakeAndStart is TakeLimit and Start in one pipeline (one round trip per node): both run,
// whatever the other finds, so a start that ran while its take found no slot is the caller's to
// undo (a requeue that gives the attempt back).
func (s *Store) TakeAndStart(ctx context.Context, lk LimitKeys, la LimitArgs, k Keys, sa StartArgs) TakeStart {
	cmds, werr := s.batch.runDurable(ctx, []scriptCall{
		{limitTakeScript, func(ctx context.Context, c redis.Scripter) *redis.Cmd {
			return limitTakeScript.EvalSha(ctx, c, []string{lk.Holders, lk.Fence, lk.Arrival}, s.takeArgs(la)...)
		}},
		{startScript, func(ctx context.Context, c redis.Scripter) *redis.Cmd {
			return startScript.EvalSha(ctx, c, s.startKeys(k), s.startArgs(k, sa)...)
		}},
	})
	var r TakeStart
	if r.TakeErr = cmds[0].Err(); r.TakeErr == nil {
		r.Take, r.TakeErr = parseTake(cmds[0].Val())
	} else {
		r.TakeErr = fmt.Errorf("jobstore: limit take: %w", r.TakeErr)
	}
	if r.StartErr = cmds[1].Err(); r.StartErr == nil {
		r.Started, r.StartErr = parseStarted(cmds[1].Val())
		if r.StartErr == nil && werr != nil {
			r.StartErr = fmt.Errorf("jobstore: start: %w", werr) // as Start: r.Started says what to undo
		}
	} else {
		r.StartErr = fmt.Errorf("jobstore: start: %w", r.StartErr)
	}
	return r
}

// parseTake reads the limit take script's reply.
func parseTake(res any) (Take, error) {
	state, rest, err := replyList("limit_take", res)
	if err != nil {
		return Take{}, err
	}
	tk := Take{State: TakeState(state)}
	switch tk.State {
	case Taken:
		var n [4]int64
		for i := range n {
			if n[i], err = intAt("limit_take", rest, i); err != nil {
				return Take{}, err
			}
		}
		if len(rest) != 4 {
			return Take{}, replyError("limit_take", res)
		}
		tk.Token, tk.Held, tk.Wait, tk.At = n[0], int(n[1]), time.Duration(n[2])*time.Millisecond, time.UnixMilli(n[3])
		return tk, nil
	case Full, RateWait:
		wait, err := intAt("limit_take", rest, 0)
		tk.Wait = time.Duration(wait) * time.Millisecond
		if err == nil && tk.State == Full {
			var held int64
			held, err = intAt("limit_take", rest, 1)
			tk.Held = int(held)
		}
		return tk, err
	}
	return Take{}, replyError("limit_take", res)
}

// LimitRelease gives a slot back (Owner; "" holds none) and pushes the key's next starts back by
// PushBack (0: not), keeping Tolerance as the rate's burst tolerance.
type LimitRelease struct {
	Keys      LimitKeys
	Owner     string
	PushBack  time.Duration
	Tolerance time.Duration
}

func (r LimitRelease) eval(ctx context.Context, c redis.Scripter) *redis.Cmd {
	return limitReleaseScript.EvalSha(ctx, c, []string{r.Keys.Holders, r.Keys.Arrival}, r.Owner, ms(r.PushBack), ms(r.Tolerance))
}

// ReleaseLimit gives a slot back on its own round trip (a delivery that took one and did not
// run; the finish sends it in its own pipeline).
func (s *Store) ReleaseLimit(ctx context.Context, r LimitRelease) error {
	if err := s.batch.run(ctx, []scriptCall{{limitReleaseScript, r.eval}})[0].Err(); err != nil {
		return fmt.Errorf("jobstore: limit release: %w", err)
	}
	return nil
}

// PostLimitRelease is ReleaseLimit without waiting: the release goes out with the batcher's next
// pipeline, after every call queued before it, and then gets its error (see Store.PostScript).
func (s *Store) PostLimitRelease(ctx context.Context, r LimitRelease, then func(error)) {
	s.batch.post(ctx, []scriptCall{{limitReleaseScript, r.eval}}, func(cmds []*redis.Cmd) {
		err := cmds[0].Err()
		if err != nil {
			err = fmt.Errorf("jobstore: limit release: %w", err)
		}
		then(err)
	})
}

// LimitRenewal is one held slot to extend.
type LimitRenewal struct {
	Keys  LimitKeys
	Owner string
	TTL   time.Duration
}

// RenewLimits extends held slots in one pipeline (one round trip per node): held[i] reports
// whether slot i was still held, errs[i] why that is unknown (the round trip failed).
func (s *Store) RenewLimits(ctx context.Context, batch []LimitRenewal) (held []bool, errs []error) {
	calls := make([]scriptCall, len(batch))
	for i, r := range batch {
		calls[i] = scriptCall{limitRenewScript, func(ctx context.Context, c redis.Scripter) *redis.Cmd {
			return limitRenewScript.EvalSha(ctx, c, []string{r.Keys.Holders}, r.Owner, ms(r.TTL))
		}}
	}
	held, errs = make([]bool, len(batch)), make([]error, len(batch))
	renewed, _ := runPipelined(ctx, s.rdb, Durability{}, calls)
	for i, c := range renewed {
		n, err := c.Int64()
		held[i], errs[i] = n == 1, err
	}
	return held, errs
}

// scriptCall is one script call of a pipeline: eval queues it by SHA.
type scriptCall struct {
	script *redis.Script
	eval   func(ctx context.Context, c redis.Scripter) *redis.Cmd
}

// runPipelined sends calls in one pipeline (one round trip per node) and returns their commands,
// each with its own answer or error, and, when d is on, whether the replicas acknowledged them (a
// WAIT after them; see Durability.Exec). A script Redis does not have (after a restart or
// failover) is loaded and its calls sent again: they did not run.
func runPipelined(ctx context.Context, rdb redis.UniversalClient, d Durability, calls []scriptCall) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(calls))
	werr := d.Exec(ctx, rdb, func(pipe redis.Pipeliner) {
		for i, c := range calls {
			cmds[i] = c.eval(ctx, pipe)
		}
	})
	var missing []int
	for i, c := range cmds {
		if isNoScript(c.Err()) {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return cmds, werr
	}
	var resend []int
	for _, i := range missing {
		if calls[i].script == nil {
			continue // a caller's own EVALSHA (Store.Batched): the caller sends EVAL next, as Script.Run does
		}
		if err := calls[i].script.Load(ctx, rdb).Err(); err == nil {
			resend = append(resend, i) // else its command keeps its NOSCRIPT error
		}
	}
	if len(resend) == 0 {
		return cmds, werr
	}
	werr = d.Exec(ctx, rdb, func(pipe redis.Pipeliner) {
		for _, i := range resend {
			cmds[i] = calls[i].eval(ctx, pipe)
		}
	})
	return cmds, werr
}

func isNoScript(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") }

// The limit scripts join the scripts the load test checks.
func init() { allScripts = append(allScripts, limitTakeScript, limitRenewScript, limitReleaseScript) }
