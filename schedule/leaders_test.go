package schedule

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/jobguard/jobguard/internal/testsupport"
)

// The three-leader test's schedules: one per catch-up policy, all @every 1s and overlap allow, run
// by the same leaders through the same faults. A leader steps every schedule with one reading of
// the clock, so a window with every process down gives the three the same missed ticks: all
// creates them, latest the last of them, none nothing.
var leaderSpecs = []Spec{
	{Name: "every-all", Cron: "@every 1s", Type: typ, Overlap: Allow, CatchUp: All},
	{Name: "every-latest", Cron: "@every 1s", Type: typ, Overlap: Allow, CatchUp: Latest},
	{Name: "every-none", Cron: "@every 1s", Type: typ, Overlap: Allow, CatchUp: None},
}

const leaderGrace = 5 * time.Second

// soakFor is how long the three-leader test goes on faulting: SCHEDULE_SOAK (a Go duration; make
// schedule-soak sets 5m), or 0: one round of each fault, about 40 s, in make test.
func soakFor(t *testing.T) time.Duration {
	v := os.Getenv("SCHEDULE_SOAK")
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("SCHEDULE_SOAK=%q: %v", v, err)
	}
	return d
}

// pool is the three processes of the test; a killed one is replaced.
type pool struct {
	t     *testing.T
	b     *bundle
	live  []*instance
	every []*instance // every process started, for their counters
	n     int
	downs int // windows with every process down
	// downAt is, for each of them, the last tick each schedule had dealt with when all went down.
	downAt []map[string]time.Time
	// downTimes are when they went down and came back.
	downTimes [][2]time.Time
	// starts are the schedules' first cursors.
	starts map[string]time.Time
}

func (p *pool) spawn() {
	p.n++
	in := p.b.start(fmt.Sprintf("w%d", p.n), nil)
	p.live = append(p.live, in)
	p.every = append(p.every, in)
}

func (p *pool) drop(in *instance) {
	for i, x := range p.live {
		if x == in {
			p.live = append(p.live[:i], p.live[i+1:]...)
			return
		}
	}
}

// leader waits for a leader among the live processes other than not.
func (p *pool) leader(what string, not ...*instance) *instance {
	p.t.Helper()
	var l *instance
	testsupport.Eventually(p.t, 10*time.Second, what, func() bool {
	next:
		for _, in := range p.live {
			for _, x := range not {
				if in == x {
					continue next
				}
			}
			if in.sch.Leading() {
				l = in
				return true
			}
		}
		return false
	})
	return l
}

// advance waits until every schedule has dealt with the tick n seconds from now (a schedule a
// leader steps after another's catch-up may lag it by seconds).
func (p *pool) advance(what string, n int) {
	p.t.Helper()
	target := time.Now().Truncate(time.Second).Add(time.Duration(n) * time.Second)
	testsupport.Eventually(p.t, 20*time.Second, what, func() bool {
		for _, sp := range leaderSpecs {
			if p.b.cursor(sp.Name).Before(target) {
				return false
			}
		}
		return true
	})
}

// killMidTick kills (-9) the leader at its k-th script call from now (1-4: in a tick, its job's
// create, delivery, confirmation, the cursor write, as the arming falls) and starts a replacement.
func (p *pool) killMidTick(k int) {
	l := p.leader("a leader to kill")
	l.gate.killAt.Store(int32(k))
	testsupport.Eventually(p.t, 10*time.Second, "the leader killed mid-tick", l.gate.isDead)
	l.stop() // the lease stays until its TTL
	p.drop(l)
	p.spawn()
	p.leader("a new leader after the kill", l)
	p.advance("two ticks after the kill", 2)
}

// pauseMidTick SIGSTOPs the leader in the middle of a tick past its lease (its keeper cannot
// renew either), then resumes it: it wakes up still believing in its lease for a moment.
func (p *pool) pauseMidTick() {
	l := p.leader("a leader to pause")
	l.gate.armed.Store(true)
	testsupport.Eventually(p.t, 10*time.Second, "the leader paused mid-tick", l.gate.isPaused)
	p.leader("a new leader after the pause", l)
	p.advance("two ticks during the pause", 2)
	l.gate.resume()
	p.advance("two ticks after the resume", 2)
}

// cutOff cuts the leader off Redis by its fault proxy (every connection dropped, new ones
// refused) past its lease, then lets it back.
func (p *pool) cutOff() {
	l := p.leader("a leader to cut off")
	l.proxy.Block()
	p.leader("a new leader after the cut-off", l)
	p.advance("two ticks during the cut-off", 2)
	l.proxy.Unblock()
	p.advance("two ticks after the cut-off", 2)
}

// allDown kills (-9) every process, keeps them down until at least three ticks of each schedule
// are older than the grace, and starts three new ones.
func (p *pool) allDown() {
	down := time.Now()
	for _, in := range p.live {
		in.gate.kill()
		in.stop()
	}
	p.live = nil
	p.downs++
	// Where each schedule stood: the last tick dealt with (a leader killed in the middle of a step
	// may have dealt with a tick of one schedule and not yet of the next). Read again once the
	// claim of a job the kill interrupted ran out (it counts as a job until then).
	stood := func() map[string]time.Time {
		at := map[string]time.Time{}
		for _, sp := range leaderSpecs {
			at[sp.Name] = p.b.cursor(sp.Name)
			if jobs := p.b.jobs(sp.Name); len(jobs) > 0 && jobs[len(jobs)-1].After(at[sp.Name]) {
				at[sp.Name] = jobs[len(jobs)-1]
			}
		}
		return at
	}
	var last time.Time // the most advanced schedule (one may lag: its tick's claim left by a leader cut off)
	for _, c := range stood() {
		if c.After(last) {
			last = c
		}
	}
	time.Sleep(time.Until(last.Add(leaderGrace + 3500*time.Millisecond)))
	p.downAt = append(p.downAt, stood())
	p.downTimes = append(p.downTimes, [2]time.Time{down, time.Now()})
	for range 3 {
		p.spawn()
	}
	p.leader("a leader after every process was down")
	p.advance("three ticks after the restart", 3)
}

// TestOneJobPerTickAcrossLeaders: three processes share three @every 1s schedules (catch-up all,
// latest and none) through rounds of faults: the leader killed (-9) in the middle of a tick (at
// its create, delivery, confirmation or cursor write, round by round) and replaced, the leader
// SIGSTOPped mid-tick past its lease and resumed, the leader cut off by the fault proxy and let
// back, and every process down for longer than the grace. Each round is checked, then the whole
// window: every tick from the first cursor to the last tick dealt with has exactly one job and
// one delivery, but the ticks of the all-down windows older than the grace, which the catch-up
// policy decides (all: every one, latest: the last, none: none; counted as missed). With
// SCHEDULE_SOAK set the rounds go on for that long.
func TestOneJobPerTickAcrossLeaders(t *testing.T) {
	t.Parallel()
	soak := soakFor(t)
	b := newBundle(t, Config{Grace: leaderGrace, EnqueueTimeout: time.Second}, leaderSpecs...)
	p := &pool{t: t, b: b}
	for range 3 {
		p.spawn()
	}
	p.leader("a leader")
	p.starts = map[string]time.Time{}
	testsupport.Eventually(t, 10*time.Second, "the schedules' cursors", func() bool {
		for _, sp := range leaderSpecs {
			if p.starts[sp.Name].IsZero() {
				p.starts[sp.Name] = b.cursor(sp.Name)
			}
		}
		return !p.starts[leaderSpecs[0].Name].IsZero() && !p.starts[leaderSpecs[1].Name].IsZero() && !p.starts[leaderSpecs[2].Name].IsZero()
	})
	p.advance("two ticks", 2)
	began := time.Now()
	for round := 0; round == 0 || time.Since(began) < soak; round++ {
		p.killMidTick(1 + round%4)
		p.check(fmt.Sprintf("round %d, after the kill", round+1), false)
		p.pauseMidTick()
		p.check(fmt.Sprintf("round %d, after the pause", round+1), false)
		p.cutOff()
		p.check(fmt.Sprintf("round %d, after the cut-off", round+1), false)
		if round%2 == 0 {
			p.allDown()
			p.check(fmt.Sprintf("round %d, after every process was down", round+1), false)
		}
	}
	for _, in := range p.live {
		in.stop()
	}
	p.check("at the end", true)
}

// window is one schedule's ticks from its first cursor to its last tick dealt with.
type window struct {
	name       string
	start, end time.Time
	ticks      []time.Time
	jobs       map[int64]bool
}

func (p *pool) window(name string, start time.Time) window {
	b := p.b
	w := window{name: name, start: start, end: b.cursor(name), jobs: map[int64]bool{}}
	// The window ends at the last tick dealt with: the cursor, or a job created by a leader that
	// stopped before it wrote the cursor (the next leader would find that job and move on).
	for _, at := range b.jobs(name) {
		w.jobs[at.UnixMilli()] = true
		if at.After(w.end) {
			w.end = at
		}
	}
	for at := start.Truncate(time.Second).Add(time.Second); !at.After(w.end); at = at.Add(time.Second) {
		w.ticks = append(w.ticks, at)
	}
	return w
}

// describeDowns describes the all-down windows for a failure: where each schedule stood, when the
// processes went down and came back, and each schedule's jobs around it.
func (p *pool) describeDowns(ws map[CatchUp]window) string {
	var out []string
	for i, at := range p.downAt {
		out = append(out, fmt.Sprintf("window %d: down %s, up %s", i+1, p.downTimes[i][0].Format("15:04:05.000"), p.downTimes[i][1].Format("15:04:05.000")))
		for _, w := range ws {
			var jobs []string
			for _, t := range w.ticks {
				if t.After(at[w.name].Add(-3*time.Second)) && t.Before(p.downTimes[i][1].Add(5*time.Second)) && w.jobs[t.UnixMilli()] {
					jobs = append(jobs, t.Format("15:04:05"))
				}
			}
			out = append(out, fmt.Sprintf("  %s: at %s, jobs %v", w.name, at[w.name].Format("15:04:05.000"), jobs))
		}
	}
	return strings.Join(out, "\n")
}

// gaps are the runs of consecutive ticks of w without a job.
func (w window) gaps() [][]time.Time {
	var out [][]time.Time
	var run []time.Time
	for _, at := range w.ticks {
		if w.jobs[at.UnixMilli()] {
			if run != nil {
				out = append(out, run)
			}
			run = nil
			continue
		}
		run = append(run, at)
	}
	if run != nil {
		out = append(out, run)
	}
	return out
}

// check checks the windows of the three schedules so far (final: all processes stopped, with
// the deliveries and the counters too) and logs the figures.
func (p *pool) check(when string, final bool) {
	t := p.t
	t.Helper()
	// The schedules' first cursors were written in one step of the first leader; the windows are
	// compared on the ticks they share.
	var start time.Time
	ws := map[CatchUp]window{}
	for _, sp := range leaderSpecs {
		if c := p.starts[sp.Name]; c.After(start) {
			start = c
		}
	}
	for _, sp := range leaderSpecs {
		ws[sp.CatchUp] = p.window(sp.Name, start)
	}
	all, latest, none := ws[All], ws[Latest], ws[None]
	for _, w := range ws {
		for at := range w.jobs {
			if tm := time.UnixMilli(at); tm.After(start) && tm.UnixMilli()%1000 != 0 {
				t.Fatalf("%s: %s: job for %s, not a tick", when, w.name, tm)
			}
		}
	}
	// all: no gap. none: one gap per all-down window, from the tick after the one it had dealt
	// with to the last tick older than the grace when the first leader after it looked (at least
	// three: the window was that much longer than the grace). latest: from the tick after its own
	// to the one before that last tick, which it caught up.
	if g := all.gaps(); len(g) > 0 {
		t.Fatalf("%s: %s: ticks without a job: %v", when, all.name, g)
	}
	noneGaps, latestGaps := none.gaps(), latest.gaps()
	if n := len(noneGaps); n > p.downs || final && n != p.downs || len(latestGaps) != n {
		t.Fatalf("%s: %d and %d gaps (%s, %s) for %d windows with every process down: %v, %v; %s", when, n, len(latestGaps), none.name, latest.name, p.downs, noneGaps, latestGaps, p.describeDowns(ws))
	}
	missedNone, missedLatest := 0, 0
	for i, g := range noneGaps {
		last := g[len(g)-1]
		if first := p.downAt[i][none.name].Add(time.Second); !g[0].Equal(first) || len(g) < 3 || last.Equal(none.ticks[len(none.ticks)-1]) {
			t.Fatalf("%s: %s: ticks without a job %v, want from %s, at least 3, and a job after them; %s", when, none.name, g, first, p.describeDowns(ws))
		}
		var want []time.Time
		for at := p.downAt[i][latest.name].Add(time.Second); at.Before(last); at = at.Add(time.Second) {
			want = append(want, at)
		}
		if fmt.Sprint(latestGaps[i]) != fmt.Sprint(want) {
			t.Fatalf("%s: %s: ticks without a job %v, want %v (from its last tick dealt with to the tick before %s); %s", when, latest.name, latestGaps[i], want, last, p.describeDowns(ws))
		}
		missedNone += len(g)
		missedLatest += len(want)
	}
	if !final {
		t.Logf("%s: %d ticks, every one with its job (%s), %d missed by %s, %d by %s", when, len(all.ticks), all.name, missedNone, none.name, missedLatest, latest.name)
		return
	}

	// Every job of a window has one delivery in asynq and no tick of it has a delivery without a
	// job; the processes' counters agree: one enqueue per job, the missed ticks counted.
	deliveries := map[string]int{}
	insp := asynq.NewInspectorFromRedisClient(p.b.db.Client)
	for page := 1; ; page++ {
		tasks, err := insp.ListPendingTasks("default", asynq.PageSize(1000), asynq.Page(page))
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			deliveries[strings.TrimSuffix(task.ID, ".d1")]++
		}
		if len(tasks) < 1000 {
			break
		}
	}
	var enqueued, existed, jobs int64
	for _, in := range p.every {
		enqueued += in.sch.Stats.Enqueued.Load()
		existed += in.sch.Stats.Existed.Load()
	}
	missed := map[string]float64{}
	for _, sp := range leaderSpecs {
		for _, in := range p.every {
			missed[sp.Name] += testutil.ToFloat64(in.sch.m.ticks.WithLabelValues(sp.Name, OutcomeMissed))
		}
	}
	for _, sp := range leaderSpecs {
		w := ws[sp.CatchUp]
		jobs += int64(len(p.b.jobs(sp.Name)))
		dup, leftover, inWindow := 0, 0, 0
		for _, at := range w.ticks {
			n := deliveries[TickJobID(sp.Name, "", at)]
			switch has := w.jobs[at.UnixMilli()]; {
			case has && n != 1:
				dup++
				t.Errorf("%s: tick %s: %d deliveries", sp.Name, at, n)
			case has:
				inWindow++
			case n > 0:
				// A missed tick's delivery left by a leader killed mid-enqueue when every process
				// went down: no record, so a worker acknowledges it without running (and the
				// reconciler deletes it).
				leftover++
			}
		}
		want := map[CatchUp]int{All: 0, Latest: missedLatest, None: missedNone}[sp.CatchUp]
		if int(missed[sp.Name]) != want {
			t.Errorf("%s: %v ticks counted missed, want %d", sp.Name, missed[sp.Name], want)
		}
		missing := len(w.ticks) - want - inWindow
		if missing != 0 {
			t.Errorf("%s: %d ticks missing", sp.Name, missing)
		}
		t.Logf("%s: ticks %d, missed by the catch-up policy %d, expected jobs %d, jobs %d, duplicates %d, missing %d; deliveries of missed ticks left by a killed leader %d",
			sp.Name, len(w.ticks), want, len(w.ticks)-want, inWindow, dup, missing, leftover)
	}
	if enqueued != jobs {
		t.Errorf("%d jobs, but %d enqueued", jobs, enqueued)
	}
	t.Logf("%d processes, %d windows with every process down, %d ticks found created by another leader", len(p.every), p.downs, existed)
}
