package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/faultproxy"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
	"github.com/jobguard/jobguard/locking"
)

const typ = "tick"

// gate is a go-redis hook that stands for the process's state as Redis sees it: open, paused
// (SIGSTOP: commands wait until resumed) or dead (kill -9: commands fail at once).
type gate struct {
	mu     sync.Mutex
	dead   bool
	paused chan struct{} // non-nil while paused; closed on resume
	// armed pauses the process at its next script call of its own (not a pipeline: the keeper's
	// renewals are pipelined), i.e. in the middle of a tick: its job's create or its cursor write.
	armed atomic.Bool
	// killAt > 0 kills the process at its killAt-th script call from now (that call fails unsent):
	// 1 the tick job's create, 2 asynq's delivery, 3 the confirmation, 4 the cursor write.
	killAt atomic.Int32
}

var errDead = errors.New("test: process killed")

func (g *gate) pass(ctx context.Context) error {
	g.mu.Lock()
	dead, paused := g.dead, g.paused
	g.mu.Unlock()
	if dead {
		return errDead
	}
	if paused != nil {
		select {
		case <-paused:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (g *gate) pause() { g.mu.Lock(); g.paused = make(chan struct{}); g.mu.Unlock() }
func (g *gate) isPaused() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.paused != nil
}
func (g *gate) resume() {
	g.mu.Lock()
	close(g.paused)
	g.paused = nil
	g.mu.Unlock()
}
func (g *gate) kill() { g.mu.Lock(); g.dead = true; g.mu.Unlock() }
func (g *gate) isDead() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dead
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if err := g.pass(ctx); err != nil {
			return nil, err
		}
		return next(ctx, network, addr)
	}
}
func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			if g.armed.CompareAndSwap(true, false) {
				g.pause()
			}
			if g.killAt.Load() > 0 && g.killAt.Add(-1) == 0 {
				g.kill()
			}
		}
		if err := g.pass(ctx); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}
func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := g.pass(ctx); err != nil {
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// fakeClock is a clock the test moves.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time       { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Set(t time.Time)      { c.ns.Store(t.UnixNano()) }
func newFakeClock(t time.Time) *fakeClock { c := &fakeClock{}; c.Set(t); return c }

// instance is one process running a scheduler on its own Redis client.
type instance struct {
	gate   *gate
	proxy  *faultproxy.Proxy // between the process and Redis: Block cuts it off the network
	rdb    *redis.Client
	stack  *engine.Stack
	sch    *Scheduler
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// bundle is one test's Redis database and the processes on it.
type bundle struct {
	t     *testing.T
	db    redistest.DB
	specs []Spec
	cfg   Config
}

func newBundle(t *testing.T, cfg Config, specs ...Spec) *bundle {
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = time.Second
	}
	if cfg.Poll == 0 {
		cfg.Poll = 100 * time.Millisecond
	}
	cfg.Build = func(s Spec) (engine.Spec, error) {
		return engine.Spec{Type: s.Type, Tenant: "t1", Payload: s.Payload}, nil
	}
	return &bundle{t: t, db: redistest.NewDB(t), specs: specs, cfg: cfg}
}

// start starts a process; register adds the task type's handler (nil: a no-op).
func (b *bundle) start(name string, register func(*engine.Stack)) *instance {
	t := b.t
	g := &gate{}
	proxy, err := faultproxy.New(b.db.Server.Addr)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), DB: b.db.N, MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
	rdb.AddHook(g)
	stack := engine.New(rdb, engine.Config{Prefix: "jg", WorkerID: name, LeaseTTL: 5 * time.Second})
	if register != nil {
		register(stack)
	} else {
		stack.Register(engine.TaskConfig{Type: typ}, func(context.Context, *engine.Job) error { return nil })
	}
	sch, err := New(stack, asynq.NewClientFromRedisClient(rdb), b.specs, b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{gate: g, proxy: proxy, rdb: rdb, stack: stack, sch: sch, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(in.done); _ = sch.Run(ctx) }()
	t.Cleanup(func() { in.stop(); proxy.Close() })
	return in
}

// serve runs the instance's stack under an asynq server of two handlers on the default queue; the
// caller shuts it down.
func (in *instance) serve(t *testing.T) *asynq.Server {
	t.Helper()
	srv := asynq.NewServerFromRedisClient(in.rdb, in.stack.ServerConfig(asynq.Config{
		Concurrency: 2, Queues: map[string]int{"default": 1}, ShutdownTimeout: 2 * time.Second,
		Logger: testsupport.QuietAsynq{}, LogLevel: asynq.FatalLevel, TaskCheckInterval: 50 * time.Millisecond,
	}))
	if err := srv.Start(in.stack.Mux()); err != nil {
		t.Fatal(err)
	}
	return srv
}

func (in *instance) stop() {
	in.once.Do(func() {
		in.cancel()
		<-in.done
		in.stack.Close()
		_ = in.rdb.Close()
	})
}

func (b *bundle) cursor(name string) time.Time {
	f, err := b.db.Client.HGetAll(context.Background(), "jg:{"+jobstore.ResourceTag("schedule:"+name)+"}:schedule").Result()
	if err != nil {
		b.t.Fatal(err)
	}
	return parseState(f).cursor
}

// jobs returns the tick times of schedule name's jobs, sorted, failing on a job whose id is not
// its tick's (a job created for anything but a tick).
func (b *bundle) jobs(name string) []time.Time {
	t := b.t
	ctx := context.Background()
	keys, err := b.db.Client.Keys(ctx, "jg:{"+jobstore.ResourceTag("schedule:"+name)+"}:job:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []time.Time
	for _, k := range keys {
		if strings.HasSuffix(k, ":timeline") {
			continue
		}
		id := k[strings.LastIndex(k, ":job:")+5:]
		at := tickOf(id)
		if id != TickJobID(name, "", at) {
			t.Errorf("job %s is not the job of tick %s", id, at)
		}
		out = append(out, at)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

func queueSize(t *testing.T, rdb *redis.Client) int {
	insp := asynq.NewInspectorFromRedisClient(rdb)
	q, err := insp.GetQueueInfo("default")
	if err != nil {
		t.Fatal(err)
	}
	return q.Size
}

func diff(want, got []time.Time) (missing, extra []time.Time) {
	in := map[int64]bool{}
	for _, g := range got {
		in[g.UnixMilli()] = true
	}
	w := map[int64]bool{}
	for _, x := range want {
		w[x.UnixMilli()] = true
		if !in[x.UnixMilli()] {
			missing = append(missing, x)
		}
	}
	for _, g := range got {
		if !w[g.UnixMilli()] {
			extra = append(extra, g)
		}
	}
	return missing, extra
}

// TestPausedLeaderCreatesNoDuplicate: an old leader (lower token) that wakes up and deals with the
// same tick as the new one finds its job (Existed), and cannot move the cursor: it steps down.
func TestPausedLeaderCreatesNoDuplicate(t *testing.T) {
	t.Parallel()
	clock := newFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 500e6, time.UTC))
	b := newBundle(t, Config{Clock: clock, Poll: time.Hour}, Spec{Name: "s", Cron: "@every 1s", Type: typ})
	old, cur := b.idle("old"), b.idle("new")
	ctx := context.Background()
	p := old.plans[0]
	oldF, newF := lockingFence(1, "old"), lockingFence(2, "new")
	if err := cur.step(ctx, newF, p, state{}, clock.Now()); err != nil { // the cursor starts now
		t.Fatal(err)
	}
	st := parseState(b.raw("s"))
	clock.Set(clock.Now().Add(time.Second))
	if err := cur.step(ctx, newF, p, st, clock.Now()); err != nil {
		t.Fatal(err)
	}
	err := old.step(ctx, oldF, p, st, clock.Now()) // same state, same tick, older token
	if !errors.Is(err, errStale) {
		t.Fatalf("old leader's step: %v, want errStale", err)
	}
	if got := b.jobs("s"); len(got) != 1 || old.Stats.Existed.Load() != 1 || old.Stats.Enqueued.Load() != 0 {
		t.Fatalf("jobs %v, old leader enqueued %d existed %d; want one job, found existing", got, old.Stats.Enqueued.Load(), old.Stats.Existed.Load())
	}
	if size := queueSize(t, b.db.Client); size != 1 {
		t.Fatalf("%d deliveries, want 1", size)
	}
}

// TestCatchUp: after every process was down for ten minutes (600 ticks of @every 1s), a new
// leader creates the ticks within the grace and, of the missed ones, none, the latest, or the
// latest MaxCatchUp; the rest are counted as missed.
func TestCatchUp(t *testing.T) {
	t.Parallel()
	for _, policy := range []CatchUp{None, Latest, All} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 500e6, time.UTC)
			clock := newFakeClock(t0)
			grace := 3 * time.Second
			b := newBundle(t, Config{Clock: clock, Grace: grace}, Spec{Name: "c", Cron: "@every 1s", Type: typ, CatchUp: policy, Overlap: Allow})
			a := b.start("a", nil)
			testsupport.Eventually(t, 3*time.Second, "the cursor", func() bool { return b.cursor("c").Equal(t0.Truncate(time.Millisecond)) })
			clock.Set(t0.Add(2 * time.Second))
			testsupport.Eventually(t, 3*time.Second, "two ticks", func() bool {
				return len(b.jobs("c")) == 2 && b.cursor("c").Equal(t0.Add(1500*time.Millisecond))
			})
			a.stop()
			now := t0.Add(2*time.Second + 10*time.Minute)
			clock.Set(now) // everyone was down for 10 minutes
			nb := b.start("b", nil)
			last := now.Truncate(time.Second)
			testsupport.Eventually(t, 5*time.Second, "caught up", func() bool { return b.cursor("c").Equal(last) })
			nb.stop()

			var want []time.Time
			var missed []time.Time
			for at := t0.Truncate(time.Second).Add(time.Second); !at.After(last); at = at.Add(time.Second) {
				switch {
				case !at.After(t0.Add(2 * time.Second)):
					want = append(want, at) // before the outage
				case !at.After(now.Add(-grace)):
					missed = append(missed, at)
				default:
					want = append(want, at) // within the grace
				}
			}
			kept := map[CatchUp]int{None: 0, Latest: 1, All: MaxCatchUp}[policy]
			want = append(want, missed[len(missed)-kept:]...)
			sort.Slice(want, func(i, j int) bool { return want[i].Before(want[j]) })
			got := b.jobs("c")
			if m, x := diff(want, got); len(m) > 0 || len(x) > 0 {
				t.Fatalf("%s: %d jobs, want %d; missing %v, unexpected %v", policy, len(got), len(want), m, x)
			}
			if n := nb.sch.Stats.Missed.Load(); n != int64(len(missed)-kept) {
				t.Fatalf("%s: %d counted missed, want %d", policy, n, len(missed)-kept)
			}
		})
	}
}

// TestOverlapSkip: while a tick's job runs (a slow handler), later ticks create no job and count
// as skipped; once it ends, the next tick has a job again.
func TestOverlapSkip(t *testing.T) {
	t.Parallel()
	b := newBundle(t, Config{}, Spec{Name: "slow", Cron: "@every 1s", Type: typ, Overlap: Skip})
	release := make(chan struct{})
	var runs atomic.Int32
	in := b.start("w", func(s *engine.Stack) {
		s.Register(engine.TaskConfig{Type: typ}, func(ctx context.Context, _ *engine.Job) error {
			if runs.Add(1) == 1 {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return nil
		})
	})
	defer in.serve(t).Shutdown()
	testsupport.Eventually(t, 4*time.Second, "the first job running", func() bool { return runs.Load() == 1 })
	testsupport.Eventually(t, 5*time.Second, "two ticks skipped", func() bool { return in.sch.Stats.SkippedOverlap.Load() >= 2 })
	if n := len(b.jobs("slow")); n != 1 {
		t.Fatalf("%d jobs while the first runs, want 1", n)
	}
	close(release)
	testsupport.Eventually(t, 4*time.Second, "a new job once the first ended", func() bool { return len(b.jobs("slow")) >= 2 && runs.Load() >= 2 })
}

// idle builds a scheduler on the bundle's database that does not run (its steps are called).
func (b *bundle) idle(name string) *Scheduler {
	stack := engine.New(b.db.Client, engine.Config{Prefix: "jg", WorkerID: name})
	b.t.Cleanup(stack.Close)
	stack.Register(engine.TaskConfig{Type: typ}, func(context.Context, *engine.Job) error { return nil })
	s, err := New(stack, asynq.NewClientFromRedisClient(b.db.Client), b.specs, b.cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	return s
}

func (b *bundle) raw(name string) map[string]string {
	f, err := b.db.Client.HGetAll(context.Background(), "jg:{"+jobstore.ResourceTag("schedule:"+name)+"}:schedule").Result()
	if err != nil {
		b.t.Fatal(err)
	}
	return f
}

func lockingFence(token int64, owner string) locking.Fence {
	return locking.Fence{Token: token, Owner: owner}
}

// TestPauseResumeAndOverview: a paused schedule's ticks create no job and are counted; resumed,
// the next tick has its job; the overview shows the leader, the pause, the last tick and its job.
func TestPauseResumeAndOverview(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 500e6, time.UTC)
	clock := newFakeClock(t0)
	b := newBundle(t, Config{Clock: clock}, Spec{Name: "p", Cron: "@every 1s", Type: typ})
	in := b.start("w7", nil)
	ctx := context.Background()
	testsupport.Eventually(t, 3*time.Second, "the cursor", func() bool { return !b.cursor("p").IsZero() })
	if err := in.sch.SetPaused(ctx, "p", true); err != nil {
		t.Fatal(err)
	}
	if err := in.sch.SetPaused(ctx, "nope", true); !errors.Is(err, ErrUnknown) {
		t.Fatalf("pause of an unknown schedule: %v", err)
	}
	clock.Set(t0.Add(3 * time.Second))
	testsupport.Eventually(t, 3*time.Second, "paused ticks counted", func() bool { return in.sch.Stats.Paused.Load() == 3 })
	ov, err := in.sch.Overview(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ov.Leader != "w7" || len(ov.Schedules) != 1 || !ov.Schedules[0].Paused || ov.Schedules[0].LastTick != nil ||
		ov.Schedules[0].NextTick == nil || !ov.Schedules[0].NextTick.Equal(t0.Add(3500*time.Millisecond)) {
		t.Fatalf("overview while paused: %+v", ov)
	}
	if n := len(b.jobs("p")); n != 0 {
		t.Fatalf("%d jobs while paused", n)
	}
	if err := in.sch.SetPaused(ctx, "p", false); err != nil {
		t.Fatal(err)
	}
	clock.Set(t0.Add(4 * time.Second))
	testsupport.Eventually(t, 3*time.Second, "a job after the resume", func() bool {
		ov, err = in.sch.Overview(ctx)
		return err == nil && len(b.jobs("p")) == 1 && ov.Schedules[0].LastJobID != ""
	})
	s := ov.Schedules[0]
	if s.Paused || s.LastTick == nil || !s.LastTick.Equal(t0.Add(3500*time.Millisecond)) || s.LastJobID != TickJobID("p", "", *s.LastTick) || s.LastJobStatus != "queued" {
		t.Fatalf("overview after the resume: %+v", s)
	}
	jobs, err := in.sch.Jobs(ctx, "p")
	if err != nil || len(jobs) != 1 || jobs[0].JobID != s.LastJobID || !jobs[0].Tick.Equal(*s.LastTick) || jobs[0].Status != "queued" {
		t.Fatalf("jobs of the schedule: %+v, %v", jobs, err)
	}
	if _, err := in.sch.Jobs(ctx, "nope"); !errors.Is(err, ErrUnknown) {
		t.Fatalf("jobs of an unknown schedule: %v", err)
	}
}

// tickOf is the time a tick's job id carries.
func tickOf(id string) time.Time {
	ms, err := strconv.ParseInt(id[17:29], 16, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// TestOverlapReplace: a tick whose previous job still runs cancels it (its handler's context ends
// with engine.ErrCancelled) and creates its own.
func TestOverlapReplace(t *testing.T) {
	t.Parallel()
	b := newBundle(t, Config{}, Spec{Name: "repl", Cron: "@every 1s", Type: typ, Overlap: Replace})
	var runs atomic.Int32
	causes := make(chan error, 8)
	in := b.start("w", func(s *engine.Stack) {
		s.Register(engine.TaskConfig{Type: typ}, func(ctx context.Context, _ *engine.Job) error {
			if runs.Add(1) == 1 {
				<-ctx.Done() // slow: runs until cancelled
				causes <- context.Cause(ctx)
				return context.Cause(ctx)
			}
			return nil
		})
	})
	defer in.serve(t).Shutdown()
	testsupport.Eventually(t, 4*time.Second, "the first job running", func() bool { return runs.Load() == 1 })
	select {
	case cause := <-causes:
		if !errors.Is(cause, engine.ErrCancelled) {
			t.Fatalf("the replaced run ended with %v, want engine.ErrCancelled", cause)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the running job was not cancelled by the next tick")
	}
	testsupport.Eventually(t, 4*time.Second, "the next tick's job run", func() bool { return runs.Load() >= 2 })
	jobs := b.jobs("repl")
	v, err := in.stack.Get(context.Background(), TickJobID("repl", "", jobs[0]))
	if err != nil || v.Record.Status != "cancelled" || in.sch.Stats.Replaced.Load() < 1 {
		t.Fatalf("first job: %v %v; replaced %d", v.Record.Status, err, in.sch.Stats.Replaced.Load())
	}
}

// TestMissedCountedOnce: a catch-up step that fails (its job not built) and is done again counts
// the missed ticks once, when the cursor passes them.
func TestMissedCountedOnce(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 500e6, time.UTC)
	clock := newFakeClock(t0)
	b := newBundle(t, Config{Clock: clock, Grace: 3 * time.Second, Poll: time.Hour}, Spec{Name: "m", Cron: "@every 1s", Type: typ, CatchUp: Latest, Overlap: Allow})
	build := b.cfg.Build
	var failing atomic.Bool
	b.cfg.Build = func(s Spec) (engine.Spec, error) {
		if failing.Load() {
			return engine.Spec{}, errors.New("test: build refused")
		}
		return build(s)
	}
	s := b.idle("w")
	ctx, f, p := context.Background(), lockingFence(1, "w"), s.plans[0]
	if err := s.step(ctx, f, p, state{}, clock.Now()); err != nil {
		t.Fatal(err)
	}
	clock.Set(t0.Add(time.Minute)) // 60 ticks: 57 older than the grace, the latest of them caught up
	failing.Store(true)
	if err := s.step(ctx, f, p, parseState(b.raw("m")), clock.Now()); err == nil {
		t.Fatal("the step built a job with Build failing")
	}
	failing.Store(false)
	if err := s.step(ctx, f, p, parseState(b.raw("m")), clock.Now()); err != nil {
		t.Fatal(err)
	}
	if n, jobs := s.Stats.Missed.Load(), len(b.jobs("m")); n != 56 || jobs != 4 {
		t.Fatalf("missed %d, jobs %d; want 56 missed (once), 4 jobs (the latest missed and 3 in the grace)", n, jobs)
	}
}

// TestJobPastTheCursorIsNotMissed: a leader that stopped between a tick's job and its cursor
// write, before an outage, left a job one tick past the cursor; the next leader, past the grace,
// counts that tick as dealt with, not missed, and records its job.
func TestJobPastTheCursorIsNotMissed(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 500e6, time.UTC)
	clock := newFakeClock(t0)
	b := newBundle(t, Config{Clock: clock, Grace: 3 * time.Second, Poll: time.Hour}, Spec{Name: "j", Cron: "@every 1s", Type: typ, CatchUp: None, Overlap: Allow})
	s := b.idle("w")
	ctx, f, p := context.Background(), lockingFence(1, "w"), s.plans[0]
	if err := s.step(ctx, f, p, state{}, clock.Now()); err != nil {
		t.Fatal(err)
	}
	tick := t0.Truncate(time.Second).Add(time.Second)
	clock.Set(tick)
	id, err := s.enqueue(ctx, p, tick) // the job, but no cursor write: the leader stopped
	if err != nil {
		t.Fatal(err)
	}
	clock.Set(t0.Add(time.Minute)) // ticks 1-57 older than the grace; 1 has its job
	if err := s.step(ctx, f, p, parseState(b.raw("j")), clock.Now()); err != nil {
		t.Fatal(err)
	}
	if n, jobs := s.Stats.Missed.Load(), len(b.jobs("j")); n != 56 || jobs != 4 {
		t.Fatalf("missed %d, jobs %d; want 56 missed (ticks 2-57), 4 jobs (tick 1 and 58-60)", n, jobs)
	}
	recent, err := s.Jobs(ctx, "j")
	if err != nil || len(recent) != 4 || recent[3].JobID != id {
		t.Fatalf("the schedule's jobs: %+v, %v; want tick 1's job %s among them", recent, err, id)
	}
}

// TestOverviewOmitsANextTickThatNeverComes: a schedule with no tick within robfig/cron's five-year
// search (29 February, seen from March 2097: the next is in 2104) shows no next_tick, not year 1.
func TestOverviewOmitsANextTickThatNeverComes(t *testing.T) {
	t.Parallel()
	clock := newFakeClock(time.Date(2097, 3, 1, 0, 0, 0, 0, time.UTC))
	b := newBundle(t, Config{Clock: clock, Poll: time.Hour}, Spec{Name: "leap", Cron: "0 0 29 2 *", Type: typ})
	in := b.start("w1", nil)
	ov, err := in.sch.Overview(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(ov.Schedules[0])
	if strings.Contains(string(out), "next_tick") || strings.Contains(string(out), "0001-01-01") {
		t.Fatalf("overview of a schedule with no next tick: %s", out)
	}
}
