package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/recent"
	"github.com/jobguard/jobguard/locking"
)

// HeaderLimitKey is the delivery's limit key (Limit.Key of its spec), set at enqueue.
const HeaderLimitKey = "jobguard-limit-key"

// LimitHoldersKey is the sorted set of the slots of key's limit of task type typ (member: the
// holder's lease owner, Job.Fence().Owner; score: its expiry, unix ms in Redis's clock; a holder
// whose expiry has passed has lapsed), for a watcher or an upstream that checks a holder is live.
func LimitHoldersKey(locks *locking.Client, typ, key string) string {
	return jobstore.LimitKeysOf(locks, typ, key).Holders
}

// ErrSlotLost is the cause of a running handler's context when its limit slot lapsed (its
// renewals failed for the slot's TTL, or it expired): the run stops and its job is requeued.
var ErrSlotLost = errors.New("engine: limit slot lost")

// Limit bounds a task type's jobs per key, across every process: at most Concurrency running at
// once and Rate starts per Per. A delivery over a limit bounces without spending an attempt.
// The zero value limits nothing.
type Limit struct {
	// Key derives a job's limit key from its spec at enqueue (its tenant, an upstream host); a job
	// whose key is "" is not limited. nil: one key for the whole task type.
	Key func(Spec) string
	// Concurrency is the most jobs of one key running at once, zombies included (0: no bound).
	Concurrency int
	// Rate is the most starts of one key per Per (0: no rate limit); Per defaults to 1s.
	Rate int
	Per  time.Duration
	// Burst is how many of the Rate may start back to back (default 1: starts evenly spaced).
	Burst int
}

// String says the limit in words ("concurrency 3, rate 10 per 1s, burst 2"; "none").
func (l Limit) String() string {
	var parts []string
	if l.Concurrency > 0 {
		parts = append(parts, fmt.Sprintf("concurrency %d", l.Concurrency))
	}
	if l.Rate > 0 {
		parts = append(parts, fmt.Sprintf("rate %d per %s", l.Rate, l.Per))
		if l.Burst > 1 {
			parts = append(parts, fmt.Sprintf("burst %d", l.Burst))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func (l Limit) on() bool { return l.Concurrency > 0 || l.Rate > 0 }

func (l Limit) withDefaults() Limit {
	if l.Rate > 0 && l.Per <= 0 {
		l.Per = time.Second
	}
	if l.Burst <= 0 {
		l.Burst = 1
	}
	return l
}

// interval is the rate's emission interval, and tolerance its burst tolerance (GCRA).
func (l Limit) interval() time.Duration {
	if l.Rate <= 0 {
		return 0
	}
	return l.Per / time.Duration(l.Rate)
}

func (l Limit) tolerance() time.Duration { return time.Duration(l.Burst-1) * l.interval() }

// keyOf is the limit key of spec's jobs, and whether they carry one. A type with a Key carries
// it even while it limits nothing here: the workers' own limits (TASK_LIMITS) decide, whatever
// the enqueuing process was configured with.
func (l Limit) keyOf(spec Spec) (string, bool) {
	if l.Key == nil {
		return "*", l.on()
	}
	k := l.Key(spec)
	return k, k != ""
}

// limitHeaders are spec's headers with its limit key added (spec.Headers itself is not changed).
func limitHeaders(tc TaskConfig, spec Spec) map[string]string {
	key, ok := tc.Limit.keyOf(spec)
	if !ok {
		return spec.Headers
	}
	h := make(map[string]string, len(spec.Headers)+1)
	for k, v := range spec.Headers {
		h[k] = v
	}
	h[HeaderLimitKey] = key
	return h
}

// slot is a limit slot a delivery holds from its take to its release.
type slot struct {
	typ, owner string
	keys       jobstore.LimitKeys
	ttl        time.Duration
	tolerance  time.Duration
	token      int64
	// at is the start the rate granted, in Redis's clock.
	at time.Time
	// pushBack is set by a rate-limited run: the key's next starts wait this long.
	pushBack time.Duration

	// guarded by limiter.mu: when the slot was last taken or extended (a call sent then), when
	// it is due for renewal, and the run's cancellation and its timer.
	extended  time.Time
	nextRenew time.Time
	cancel    context.CancelCauseFunc
	expiry    *time.Timer
	// lost is set once the run was told its slot lapsed: it does not come back, as a cancelled
	// context does not, even if a renewal still in flight lands.
	lost bool

	released bool
}

// limitTick is how often the limiter looks for slots due for renewal.
const limitTick = 100 * time.Millisecond

// limitWaitNote is how often one delivery's wait for a limit is put on its job's timeline.
const limitWaitNote = 10 * time.Second

// limiter keeps the limit slots this process holds: it renews them in batches (one pipeline per
// tick with anything due: a round trip per node) for as long as their handlers run, zombies
// included, so a handler that ignores its context still counts against its key's bound.
type limiter struct {
	s    *Stack
	mu   sync.Mutex
	held map[*slot]bool
	// noted is when each waiting delivery's wait was last put on its timeline.
	noted map[string]time.Time
	// full remembers the keys (their holders keys) a take found full, for fullMemory: see speculate.
	full *recent.Set
	stop chan struct{}
	done chan struct{}
	once sync.Once

	limits *prometheus.GaugeVec
	usage  *prometheus.GaugeVec
	waits  *prometheus.CounterVec
}

func newLimiter(s *Stack) *limiter {
	return &limiter{
		s: s, held: map[*slot]bool{}, noted: map[string]time.Time{}, full: recent.New(fullMemory), stop: make(chan struct{}), done: make(chan struct{}),
		limits: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "jobguard", Name: "limit",
			Help: "Configured limits per key of each task type: concurrency (jobs at once), rate_per_second (starts), burst."}, []string{"type", "kind"}),
		usage: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "jobguard", Name: "limit_slots_held",
			Help: "Limit slots this process holds now (its running jobs of limited keys), by task type."}, []string{"type"}),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "jobguard", Name: "limit_waits_total",
			Help: "Deliveries sent back by a limit of their key, by task type and reason: full (no slot), rate (over the rate or pushed back)."}, []string{"type", "reason"}),
	}
}

// register makes the type's limit series exist (at zero when it has none). A limit Redis cannot
// keep (negative, or a rate of more than one start per millisecond) panics, as a bad
// registration does.
func (l *limiter) register(tc TaskConfig) {
	lim := tc.Limit
	if lim.Concurrency < 0 || lim.Rate < 0 || (lim.Rate > 0 && lim.interval() < time.Millisecond) {
		panic(fmt.Sprintf("engine: task type %q: limit %+v: negative, or more than one start per millisecond", tc.Type, lim))
	}
	perSecond := 0.0
	if lim.Rate > 0 {
		perSecond = float64(lim.Rate) / lim.Per.Seconds()
	}
	l.limits.WithLabelValues(tc.Type, "concurrency").Set(float64(lim.Concurrency))
	l.limits.WithLabelValues(tc.Type, "rate_per_second").Set(perSecond)
	l.limits.WithLabelValues(tc.Type, "burst").Set(float64(lim.Burst))
	l.usage.WithLabelValues(tc.Type)
	for _, r := range []string{"full", "rate"} {
		l.waits.WithLabelValues(tc.Type, r)
	}
}

// hold starts renewing sl, taken at sent.
func (l *limiter) hold(sl *slot, sent time.Time) {
	l.once.Do(func() { go l.loop() })
	l.mu.Lock()
	defer l.mu.Unlock()
	sl.extended, sl.nextRenew = sent, sent.Add(sl.ttl/3)
	l.held[sl] = true
	l.usage.WithLabelValues(sl.typ).Inc()
}

// watch returns ctx cancelled with ErrSlotLost when sl lapses; stop ends the watch.
func (l *limiter) watch(ctx context.Context, sl *slot) (context.Context, func()) {
	if sl == nil {
		return ctx, func() {}
	}
	// extended is written by the renewal loop under mu: read it there too.
	l.mu.Lock()
	defer l.mu.Unlock()
	if sl.extended.IsZero() {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	sl.cancel = cancel
	sl.expiry = time.AfterFunc(validFor(sl, sl.extended), func() { l.lose(sl, "not renewed within its TTL") })
	return ctx, func() {
		l.mu.Lock()
		sl.cancel = nil
		if sl.expiry != nil {
			sl.expiry.Stop()
		}
		l.mu.Unlock()
		cancel(nil)
	}
}

// validFor is how long sl, last extended at sent, can be trusted: its TTL less a fifth, the time
// a handler has to stop before Redis frees the slot.
func validFor(sl *slot, sent time.Time) time.Duration { return time.Until(sent.Add(sl.ttl - sl.ttl/5)) }

func (l *limiter) lose(sl *slot, why string) {
	l.mu.Lock()
	sl.lost = true
	cancel := sl.cancel
	l.mu.Unlock()
	if cancel != nil {
		cancel(fmt.Errorf("%w: %s", ErrSlotLost, why))
	}
}

// unbounded is what LimitValidFor says of a run that holds no concurrency slot: nothing to lose.
const unbounded = time.Duration(math.MaxInt64)

// remaining is how much longer sl may be trusted (Job.LimitValidFor). A slot found lapsed here is
// lost at once, not at its timer's tick: a handler that resumes from a pause may run before the
// timer's goroutine does, and its context must say what this says.
func (l *limiter) remaining(sl *slot) time.Duration {
	l.mu.Lock()
	if sl.extended.IsZero() { // a rate's start only: no slot is held
		l.mu.Unlock()
		return unbounded
	}
	d := validFor(sl, sl.extended)
	if !sl.lost && l.held[sl] && d > 0 {
		l.mu.Unlock()
		return d
	}
	l.mu.Unlock()
	l.lose(sl, "not renewed within its TTL")
	return 0
}

// drop stops renewing sl (released, or to be released).
func (l *limiter) drop(sl *slot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[sl] {
		delete(l.held, sl)
		l.usage.WithLabelValues(sl.typ).Dec()
	}
}

func (l *limiter) close() {
	l.once.Do(func() { close(l.done) }) // never started: nothing to stop
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

func (l *limiter) loop() {
	defer close(l.done)
	t := time.NewTicker(limitTick)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.renewDue()
		}
	}
}

// renewDue renews, in one batch, the slots due now and those due within a second.
func (l *limiter) renewDue() {
	now := time.Now()
	l.mu.Lock()
	var batch []*slot
	anyDue := false
	for sl := range l.held {
		if !now.Before(sl.nextRenew) {
			anyDue = true
		}
		if now.Add(time.Second).After(sl.nextRenew) {
			batch = append(batch, sl)
		}
	}
	l.mu.Unlock()
	if !anyDue {
		return
	}
	renewals := make([]jobstore.LimitRenewal, len(batch))
	for i, sl := range batch {
		renewals[i] = jobstore.LimitRenewal{Keys: sl.keys, Owner: sl.owner, TTL: sl.ttl}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	held, errs := l.s.store.RenewLimits(ctx, renewals)
	for i, sl := range batch {
		switch {
		case errs[i] != nil:
			// Unknown: the slot keeps its last expiry; its timer stops the run if none lands.
			l.mu.Lock()
			sl.nextRenew = now.Add(limitTick)
			l.mu.Unlock()
		case !held[i]:
			l.drop(sl)
			l.lose(sl, "its holder entry had expired")
		default:
			l.mu.Lock()
			sl.extended, sl.nextRenew = now, now.Add(sl.ttl/3)
			if sl.expiry != nil {
				sl.expiry.Reset(validFor(sl, now))
			}
			l.mu.Unlock()
		}
	}
}

// note reports whether delivery's wait should go on its timeline now (at most every
// limitWaitNote per delivery); a full table is emptied rather than grown.
func (l *limiter) note(delivery string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if last, ok := l.noted[delivery]; ok && now.Sub(last) < limitWaitNote {
		return false
	}
	if len(l.noted) >= 10000 {
		l.noted = map[string]time.Time{}
	}
	l.noted[delivery] = now
	return true
}

func (l *limiter) forget(delivery string) {
	l.mu.Lock()
	delete(l.noted, delivery)
	l.mu.Unlock()
}

// limitTake is the take of the delivery's limit key (its keys and arguments), false when its type
// or job is not limited.
func (s *Stack) limitTake(tc TaskConfig, headers map[string]string, owner string) (jobstore.LimitKeys, jobstore.LimitArgs, bool) {
	lim := tc.Limit
	key, ok := headers[HeaderLimitKey]
	if !lim.on() || !ok {
		return jobstore.LimitKeys{}, jobstore.LimitArgs{}, false
	}
	return s.store.LimitKeys(tc.Type, key), jobstore.LimitArgs{Owner: owner, SlotTTL: tc.LeaseTTL, Concurrency: lim.Concurrency,
		Interval: lim.interval(), Tolerance: lim.tolerance(), MaxWait: s.cfg.SlotWait}, true
}

// takeLimit takes a slot of the delivery's limit key before its start, on its own round trip. A
// delivery over a limit bounces without spending an attempt (a rate wait up to SlotWait is
// reserved and waited here instead); its timeline says why it waits.
func (s *Stack) takeLimit(ctx context.Context, keys jobstore.Keys, tc TaskConfig, lk jobstore.LimitKeys, args jobstore.LimitArgs, delivery string, log zerolog.Logger) (*slot, error) {
	sent := time.Now()
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	tk, err := s.store.TakeLimit(wctx, lk, args)
	cancel()
	if err != nil {
		return nil, s.bounce(tc.Type, "start_failed", 0, fmt.Errorf("limit take: %w", err))
	}
	sl, err := s.taken(ctx, keys, tc, lk, args, tk, delivery, sent, log)
	if err != nil || tk.Wait <= 0 {
		return sl, err
	}
	// The rate's start is reserved for this delivery: wait for it here rather than bounce.
	select {
	case <-time.After(tk.Wait):
		return sl, nil
	case <-ctx.Done():
		s.releaseLimit(ctx, sl)
		return nil, s.bounce(tc.Type, "cancelled", 0, context.Cause(ctx))
	}
}

// taken turns a take's answer into the slot it holds (kept renewed), or the bounce of a
// delivery over its limit.
func (s *Stack) taken(ctx context.Context, keys jobstore.Keys, tc TaskConfig, lk jobstore.LimitKeys, args jobstore.LimitArgs, tk jobstore.Take, delivery string, sent time.Time, log zerolog.Logger) (*slot, error) {
	lim := tc.Limit
	switch tk.State {
	case jobstore.Taken:
		s.limits.forget(delivery)
		sl := &slot{typ: tc.Type, owner: args.Owner, keys: lk, ttl: tc.LeaseTTL, tolerance: args.Tolerance, token: tk.Token, at: tk.At}
		if lim.Concurrency > 0 {
			s.limits.hold(sl, sent)
		}
		return sl, nil
	case jobstore.RateWait:
		s.limits.waits.WithLabelValues(tc.Type, "rate").Inc()
		_, detail := overLimit(lim, tk)
		s.noteWait(ctx, keys, delivery, detail, log)
		return nil, s.bounce(tc.Type, "limit_rate", tk.Wait+s.jitter(s.cfg.BounceDelay)-s.cfg.BounceDelay, errors.New(detail))
	default: // Full
		s.limits.sawFull(lk)
		s.limits.waits.WithLabelValues(tc.Type, "full").Inc()
		_, detail := overLimit(lim, tk)
		s.noteWait(ctx, keys, delivery, detail, log)
		return nil, s.bounce(tc.Type, "limit_full", 0, errors.New(detail))
	}
}

// noteWait puts a limit wait on the job's timeline (limit_wait), at most every limitWaitNote.
func (s *Stack) noteWait(ctx context.Context, keys jobstore.Keys, delivery, detail string, log zerolog.Logger) {
	log.Debug().Str("event", "limit_wait").Str("reason", detail).Msg("limit reached")
	if s.limits.note(delivery) {
		s.event(ctx, keys, Event{Event: "limit_wait", Delivery: delivery, Detail: detail})
	}
}

// releaseLimit gives back the slot of a delivery that took one and did not run (or whose finish
// could not release it), on its own round trip.
func (s *Stack) releaseLimit(ctx context.Context, sl *slot) {
	if sl == nil || sl.released {
		return
	}
	s.limits.drop(sl)
	sl.released = true
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	_ = s.store.ReleaseLimit(wctx, sl.release())
}

func (sl *slot) release() jobstore.LimitRelease {
	return jobstore.LimitRelease{Keys: sl.keys, Owner: sl.owner, PushBack: sl.pushBack, Tolerance: sl.tolerance}
}

// finishRelease is the release the finish sends with its script, nil without a slot. The slot's
// renewals stop here: released or not, the delivery's own release follows.
func (s *Stack) finishRelease(sl *slot) *jobstore.LimitRelease {
	if sl == nil || sl.released {
		return nil
	}
	s.limits.drop(sl)
	r := sl.release()
	return &r
}
