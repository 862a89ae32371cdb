package engine

import (
	"context"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// The fair admission layer's figures (make bench-fair; docs/FAIRNESS.md): start shares under
// weights, dispatch throughput with many keys against the same jobs without fair dispatch, and
// the Redis bytes each waiting job costs. They assert nothing about speed or size.

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// fairRig is a stack whose asynq servers start when asked, so a backlog can be enqueued first.
type fairRig struct {
	b      *testing.B
	db     redistest.DB
	stacks []*Stack
	client *asynq.Client
	srvs   []*asynq.Server
	// empty counts asynq's processors finding the queues empty (JOBGUARD_FAIR_EMPTY=1: asynq's
	// debug log read for it, which costs both sides a little CPU).
	empty emptyFinds
}

// newFairRig registers tc with h on servers stacks (not started; handlers: newFairRigOn).
func newFairRig(b *testing.B, servers int, tc TaskConfig, h Handler) *fairRig {
	return newFairRigOn(b, redistest.NewDB(b), servers, tc, h)
}

// newFairRigOn is newFairRig on db (JOBGUARD_FAIR_CONC handlers a server, default 4).
func newFairRigOn(b *testing.B, db redistest.DB, servers int, tc TaskConfig, h Handler) *fairRig {
	r := &fairRig{b: b, db: db, client: asynq.NewClientFromRedisClient(db.Client)}
	for i := range servers {
		s := New(db.Client, Config{Concurrency: envInt("JOBGUARD_FAIR_CONC", 4), WorkerID: fmt.Sprintf("w%d", i), LeaseTTL: 5 * time.Second})
		s.Register(tc, h)
		r.stacks = append(r.stacks, s)
	}
	b.Cleanup(r.stop)
	return r
}

func (r *fairRig) start() {
	for _, s := range r.stacks {
		cfg := s.ServerConfig(asynq.Config{Concurrency: envInt("JOBGUARD_FAIR_CONC", 4), Queues: map[string]int{"default": 1}, ShutdownTimeout: 2 * time.Second,
			Logger: testsupport.QuietAsynq{}, LogLevel: asynq.FatalLevel, TaskCheckInterval: 20 * time.Millisecond})
		if os.Getenv("JOBGUARD_FAIR_EMPTY") == "1" {
			cfg.Logger, cfg.LogLevel = &r.empty, asynq.DebugLevel
		}
		srv := asynq.NewServerFromRedisClient(r.db.Client, cfg)
		if err := srv.Start(s.Mux()); err != nil {
			r.b.Fatal(err)
		}
		r.srvs = append(r.srvs, srv)
	}
}

func (r *fairRig) stop() {
	for i, srv := range r.srvs {
		r.stacks[i].BeginShutdown()
		srv.Shutdown()
	}
	r.srvs = nil
	for _, s := range r.stacks {
		s.Close()
	}
}

// enqueueAll enqueues specs with 8 goroutines.
func (r *fairRig) enqueueAll(specs []Spec) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(specs)); i = next.Add(1) - 1 {
				if _, err := r.stacks[0].Enqueue(bg, r.client, specs[i]); err != nil {
					r.b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func (r *fairRig) succeeded() int64 {
	var n int64
	for _, s := range r.stacks {
		n += s.Stats.Succeeded.Load()
	}
	return n
}

// BenchmarkFairWeights: keys heavy (weight 5) and light (weight 1) both keep a backlog; the starts
// of each over JOBGUARD_FAIR_WEIGHT_SECONDS (default 5) are counted, and before them the most
// handlers a lone key kept busy (work-conserving: all 8).
func BenchmarkFairWeights(b *testing.B) {
	window := time.Duration(envInt("JOBGUARD_FAIR_WEIGHT_SECONDS", 5)) * time.Second
	var mu sync.Mutex
	starts := map[string]int{}
	var counting atomic.Bool
	var running, peak atomic.Int64
	tc := TaskConfig{Type: "weighted", Fair: &Fair{Capacity: 8, Weights: map[string]int{"heavy": 5}}}
	r := newFairRig(b, 2, tc, func(ctx context.Context, j *Job) error {
		n := running.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		if counting.Load() {
			mu.Lock()
			starts[string(j.Payload)]++
			mu.Unlock()
		}
		time.Sleep(20 * time.Millisecond)
		running.Add(-1)
		return nil
	})
	r.start()
	// A lone key: 200 jobs, 8 handlers.
	lone := make([]Spec, 200)
	for i := range lone {
		lone[i] = Spec{Type: "weighted", Tenant: "lone", Payload: []byte("lone")}
	}
	r.enqueueAll(lone)
	for r.succeeded() < int64(len(lone)) {
		time.Sleep(10 * time.Millisecond)
	}
	lonePeak := peak.Load()
	// Both keys saturated: enough backlog for the window at 8 handlers of 20 ms.
	perSecond := 8 * 50
	heavy, light := perSecond*int(window/time.Second), perSecond*int(window/time.Second)/3
	var specs []Spec
	for i := range heavy {
		specs = append(specs, Spec{Type: "weighted", Tenant: "heavy", Payload: []byte("heavy")})
		if i < light {
			specs = append(specs, Spec{Type: "weighted", Tenant: "light", Payload: []byte("light")})
		}
	}
	r.enqueueAll(specs)
	counting.Store(true)
	time.Sleep(window)
	counting.Store(false)
	mu.Lock()
	h, l := starts["heavy"], starts["light"]
	mu.Unlock()
	b.ReportMetric(float64(lonePeak), "lone-key-handlers")
	b.ReportMetric(float64(h)/float64(max(l, 1)), "heavy/light-starts")
	b.Logf("lone key: at most %d of 8 handlers busy; weights 5:1 over %s: heavy %d starts, light %d (%.2f:1)",
		lonePeak, window, h, l, float64(h)/float64(max(l, 1)))
}

// BenchmarkFairManyKeys: JOBGUARD_FAIR_KEYS keys (default 5000) with 2 jobs each are enqueued
// before the servers start, then drained by 8 no-op handlers (JOBGUARD_FAIR_CONC a server, 2
// servers; the fair type's Capacity JOBGUARD_FAIR_CAPACITY, default 16), with and without fair dispatch:
// the drain's throughput, and the Redis bytes per waiting job (used_memory growth over the
// enqueue; with fair dispatch also the admission keys' own MEMORY USAGE). JOBGUARD_FAIR_ROUNDS
// rounds (default 1) each run both sides, the order alternating from round to round (this
// machine's speed drifts by more than the difference measured: a side's ratio is taken against the
// other side of its own round); the reported ratios are the rounds' medians, the log gives their
// spread. JOBGUARD_FAIR_SIDE=fair (or plain) runs that side alone, for a profile of it.
func BenchmarkFairManyKeys(b *testing.B) {
	keys := envInt("JOBGUARD_FAIR_KEYS", 5000)
	var specs []Spec
	for i := range keys {
		for range 2 {
			specs = append(specs, Spec{Type: "many", Tenant: "k" + strconv.Itoa(i)})
		}
	}
	rounds := envInt("JOBGUARD_FAIR_ROUNDS", 1)
	if side := os.Getenv("JOBGUARD_FAIR_SIDE"); side != "" {
		for round := range rounds {
			drain, whole := fairManyKeysSide(b, specs, side == "fair", round == 0)
			fmt.Printf("FairManyKeys round %d, %s alone: %.0f jobs/s drained, %.0f enqueue plus drain\n", round+1, side, drain, whole)
		}
		return
	}
	var drainRatios, wholeRatios []float64
	for round := range rounds {
		rate, whole, enqueue := map[bool]float64{}, map[bool]float64{}, map[bool]float64{}
		order := []bool{false, true}
		if round%2 == 1 {
			order = []bool{true, false}
		}
		for _, fair := range order {
			rate[fair], whole[fair] = fairManyKeysSide(b, specs, fair, round == 0)
			// The enqueue's own rate, from the two: n/whole - n/drain is its time.
			enqueue[fair] = 1 / (1/whole[fair] - 1/rate[fair])
		}
		drainRatios = append(drainRatios, rate[true]/rate[false])
		wholeRatios = append(wholeRatios, whole[true]/whole[false])
		// Printed, not logged: a benchmark's log keeps its first ten lines (round 1's details).
		fmt.Printf("FairManyKeys round %d (%s first): throughput fair/plain %.2f (drain), %.2f (enqueue alone), %.2f (enqueue plus drain: %.0f and %.0f jobs/s)\n",
			round+1, map[bool]string{false: "plain", true: "fair"}[order[0]], rate[true]/rate[false], enqueue[true]/enqueue[false],
			whole[true]/whole[false], whole[true], whole[false])
	}
	b.ReportMetric(medianOf(drainRatios), "fair/plain-throughput")
	b.ReportMetric(medianOf(wholeRatios), "fair/plain-enqueue+drain")
	b.Logf("over %d rounds: fair/plain enqueue plus drain median %.2f (%.2f-%.2f), drain median %.2f (%.2f-%.2f)", rounds,
		medianOf(wholeRatios), slices.Min(wholeRatios), slices.Max(wholeRatios),
		medianOf(drainRatios), slices.Min(drainRatios), slices.Max(drainRatios))
}

// medianOf is the median of xs (not empty).
func medianOf(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// fairManyKeysSide enqueues specs and drains them, with fair dispatch or without, on a
// redis-server of its own; it returns the drain's jobs/s and the enqueue plus drain's.
// Its details are logged when detail is set.
func fairManyKeysSide(b *testing.B, specs []Spec, fair, detail bool) (drainRate, wholeRate float64) {
	tc := TaskConfig{Type: "many"}
	if fair {
		tc.Fair = &Fair{Capacity: envInt("JOBGUARD_FAIR_CAPACITY", 16)}
	}
	// A redis-server of its own, and the Go heap collected before: the side that ran second on a
	// shared server (flushed between the sides) measured 0.13-0.16 lower in the fair/plain ratio
	// than when it ran first.
	runtime.GC()
	srv := redistest.Start(b)
	defer srv.Stop()
	r := newFairRigOn(b, redistest.DB{Server: srv, Client: srv.Client(b, 0)}, 2, tc, func(ctx context.Context, j *Job) error { return nil })
	defer r.stop()
	before := usedMemory(b, r.db.Client)
	enqueueBegin, enqueueCPU := time.Now(), processCPU()
	r.enqueueAll(specs)
	enqueueTook, enqueueCPU := time.Since(enqueueBegin), processCPU()-enqueueCPU
	grown := usedMemory(b, r.db.Client) - before
	admission := int64(0)
	if fair {
		admission = fairAdmissionBytes(r)
	}
	scriptTimesOn := os.Getenv("JOBGUARD_FAIR_SCRIPT_TIMES") == "1"
	if scriptTimesOn {
		if _, err := startMeter(r.db.Client); err != nil { // SLOWLOG at 0 from here
			b.Fatal(err)
		}
	}
	calls0, usec0 := redisWork(b, r.db.Client)
	reads0 := redisReads(b, r.db.Client)
	mix0, usec0s, _ := commandStats(r.db.Client)
	begin, drainCPU := time.Now(), processCPU()
	r.start()
	for r.succeeded() < int64(len(specs)) {
		time.Sleep(5 * time.Millisecond)
	}
	took, drainCPU := time.Since(begin), processCPU()-drainCPU
	calls1, usec1 := redisWork(b, r.db.Client)
	reads1 := redisReads(b, r.db.Client)
	if scriptTimesOn {
		logScriptTimes(b, r.db.Client, len(specs))
	}
	name := map[bool]string{false: "plain", true: "fair"}[fair]
	drainRate = float64(len(specs)) / took.Seconds()
	// The drain alone flatters the plain side: its asynq enqueues ran before it, a fair job's
	// at its admission, inside the drain. Enqueue plus drain counts both sides' whole work.
	wholeRate = float64(len(specs)) / (took + enqueueTook).Seconds()
	if !detail {
		return drainRate, wholeRate
	}
	logCommandMix(b, r.db.Client, mix0, usec0s, len(specs))
	perJob := func(a, b int64) float64 { return float64(b-a) / float64(len(specs)) }
	b.Logf("%s drain: %.1f Redis commands in %.1f reads and %.0f µs of Redis CPU per job; the Go process's CPU per job %.0f µs in the enqueue, %.0f µs in the drain",
		name, perJob(calls0, calls1), perJob(reads0, reads1), perJob(usec0, usec1),
		enqueueCPU*1e6/float64(len(specs)), drainCPU*1e6/float64(len(specs)))
	b.ReportMetric(float64(grown)/float64(len(specs)), name+"-B/waiting-job")
	if fair {
		b.ReportMetric(float64(admission)/float64(len(specs)), "admission-B/waiting-job")
	}
	if os.Getenv("JOBGUARD_FAIR_EMPTY") == "1" {
		b.Logf("%s: asynq's processors found the queue empty %d times in the drain", name, r.empty.n.Load())
	}
	b.Logf("%s: %d jobs drained in %s (%.0f jobs/s); used_memory grew %d B per waiting job%s", name, len(specs),
		took.Round(time.Millisecond), drainRate, grown/int64(len(specs)),
		map[bool]string{false: "", true: fmt.Sprintf(", of which the admission keys %d B", admission/int64(len(specs)))}[fair])
	return drainRate, wholeRate
}

// fairAdmissionBytes is the MEMORY USAGE of r's fair admission keys (type "many", one shard).
func fairAdmissionBytes(r *fairRig) int64 {
	var n int64
	k := r.stacks[0].store.FairKeys(jobstore.FairShard{Type: "many"})
	for _, key := range r.db.Client.Keys(bg, k.WaitPrefix+"*").Val() {
		n += r.db.Client.MemoryUsage(bg, key, 0).Val()
	}
	for _, key := range []string{k.Ready, k.Backlog, k.Running, k.Admitted, k.Weight, k.Pass, k.VTime, k.Once, k.Withdrawn} {
		n += r.db.Client.MemoryUsage(bg, key, 0).Val()
	}
	return n
}

// BenchmarkFairRateFlood: a fairly dispatched type whose Limit has a rate per key (the tenant;
// JOBGUARD_FAIR_RATE starts a second, default 20, no burst) and two keys flooding it with
// JOBGUARD_FAIR_RATE_JOBS jobs each (default 100), 8 handlers, capacity 8. The rate is still
// enforced at the start (docs/FAIRNESS.md): an admitted job whose key's next token is due within
// SlotWait (1 s) waits for it in its handler; one due later bounces through asynq to its due time.
// Reported: bounces per job, and the drain's time against the rate's floor.
func BenchmarkFairRateFlood(b *testing.B) {
	perKey, rate := envInt("JOBGUARD_FAIR_RATE_JOBS", 100), envInt("JOBGUARD_FAIR_RATE", 20)
	tc := TaskConfig{Type: "rated", Fair: &Fair{Capacity: 8},
		Limit: Limit{Rate: rate, Per: time.Second, Key: func(s Spec) string { return s.Tenant }}}
	r := newFairRig(b, 2, tc, func(ctx context.Context, j *Job) error { return nil })
	var specs []Spec
	for i := range perKey {
		for _, key := range []string{"a", "b"} {
			specs = append(specs, Spec{Type: "rated", Tenant: key, Payload: []byte(strconv.Itoa(i))})
		}
	}
	r.start()
	begin := time.Now()
	r.enqueueAll(specs)
	for r.succeeded() < int64(len(specs)) {
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(begin)
	bounces := int64(0)
	for _, s := range r.stacks {
		bounces += s.Stats.Bounces.Load()
	}
	floor := time.Duration(float64(perKey-1) / float64(rate) * float64(time.Second))
	b.ReportMetric(float64(bounces)/float64(len(specs)), "bounces/job")
	b.ReportMetric(took.Seconds(), "drain-s")
	b.Logf("rate %d/s per key, 2 keys x %d jobs: drained in %s (floor %s), %d bounces (%.2f per job)", rate, perKey,
		took.Round(time.Millisecond), floor.Round(time.Millisecond), bounces, float64(bounces)/float64(len(specs)))
}

// redisWork is the commands Redis ran so far and the µs it spent on them (commandStats, summed).
func redisWork(b *testing.B, rdb *redis.Client) (calls, usec int64) {
	c, u, err := commandStats(rdb)
	if err != nil {
		b.Fatal(err)
	}
	for name := range c {
		calls, usec = calls+int64(c[name]), usec+int64(u[name])
	}
	return calls, usec
}

// redisReads is how many reads of its clients' connections Redis has served (INFO stats
// total_reads_processed): each is one round trip, whatever number of commands it carried.
func redisReads(b *testing.B, rdb *redis.Client) int64 {
	info, err := rdb.Info(bg, "stats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_reads_processed:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Fatal("INFO stats has no total_reads_processed")
	return 0
}

// logScriptTimes logs the µs of Redis time per job of each script run since startMeter (SLOWLOG at
// threshold 0: JOBGUARD_FAIR_SCRIPT_TIMES=1, at most 200,000 commands, so a few thousand keys).
func logScriptTimes(b *testing.B, rdb *redis.Client, jobs int) {
	times, err := scriptTimes(rdb)
	if err != nil {
		b.Fatal(err)
	}
	names := slices.Collect(maps.Keys(times))
	sort.Slice(names, func(i, j int) bool { return times[names[i]] > times[names[j]] })
	var sb strings.Builder
	for _, name := range names {
		fmt.Fprintf(&sb, "\n  %6.1f µs  %s", times[name]/float64(jobs), name)
	}
	b.Logf("Redis time per job by script (SLOWLOG):%s", sb.String())
}

// logCommandMix logs the commands Redis ran since before (commandStats' calls and µs), per job, most
// calls first. A script's µs include its commands'.
func logCommandMix(b *testing.B, rdb *redis.Client, before, usecBefore map[string]float64, jobs int) {
	after, usec, err := commandStats(rdb)
	if err != nil {
		b.Fatal(err)
	}
	names := make([]string, 0, len(after))
	for name := range after {
		if after[name] > before[name] {
			names = append(names, name)
		}
	}
	sort.Slice(names, func(i, j int) bool { return after[names[i]]-before[names[i]] > after[names[j]]-before[names[j]] })
	var sb strings.Builder
	for _, name := range names {
		fmt.Fprintf(&sb, " %s=%.2f/%.1fµs", name, (after[name]-before[name])/float64(jobs), (usec[name]-usecBefore[name])/float64(jobs))
	}
	b.Logf("commands per job (calls/µs):%s", sb.String())
}
