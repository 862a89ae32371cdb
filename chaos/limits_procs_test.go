package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/redistest"
)

// The limits across processes (make chaos-limits, CHAOS=limits): jobguard's concurrency limit per
// key and its rate limit per key, held by real worker processes on a real Redis, the former
// while holders are killed, paused and cut off. The processes run chaos/limitprobe: jobguard
// with a limit-probe task type whose runs work in steps, each taken only while the run's context
// lives and its slot may be trusted (Job.LimitValidFor), and logged on stderr.

// probeType is chaos/limitprobe's task type.
const probeType = "limit-probe"

// probeLine is a line chaos/limitprobe logs for each run: entered, each step, returned.
type probeLine struct {
	Event      string `json:"event"`
	JobID      string `json:"job_id"`
	LeaseOwner string `json:"lease_owner"`
	Key        string `json:"limit_key"`
	Token      int64  `json:"limit_token"`
	PID        int    `json:"pid"`
	AtNS       int64  `json:"at_ns"`
	StartMS    int64  `json:"limit_start_ms"`
	Holder     string `json:"holder"`
	By         string `json:"by"`
	Cause      string `json:"cause"`
}

// probeRun is what one run (one lease owner) of a probe job did.
type probeRun struct {
	key          string
	pid          int
	enter, leave time.Time // leave is zero when its process died first
	first, last  time.Time // its first and last step
	steps        int
	startMS      int64
	// what Redis said of the run's slot at its steps, and steps Redis called live after it had
	// called the slot lapsed (a lapsed holder that came back)
	holder          map[string]int
	lapsed, revived bool
	// what stopped it before its last step ("" when it took them all, or its process died):
	// "context, lease lost", "context, slot lost", "context, other", or "limit_valid_for"
	stoppedBy string
}

// probeLog gathers the probe's lines from every process.
type probeLog struct {
	mu   sync.Mutex
	runs map[string]*probeRun // by lease owner
}

func newProbeLog() *probeLog { return &probeLog{runs: map[string]*probeRun{}} }

func (l *probeLog) add(_ *proc, line []byte) {
	if !bytes.Contains(line, []byte(`"limit_probe_`)) {
		return
	}
	var pl probeLine
	if json.Unmarshal(line, &pl) != nil {
		return
	}
	at := time.Unix(0, pl.AtNS)
	l.mu.Lock()
	defer l.mu.Unlock()
	run := l.runs[pl.LeaseOwner]
	if run == nil {
		run = &probeRun{key: pl.Key, pid: pl.PID, holder: map[string]int{}}
		l.runs[pl.LeaseOwner] = run
	}
	switch pl.Event {
	case "limit_probe_enter":
		run.enter, run.startMS = at, pl.StartMS
	case "limit_probe_leave":
		run.leave = at
	case "limit_probe_stop":
		run.stoppedBy = stopReason(pl)
	case "limit_probe_step":
		if run.steps == 0 || at.Before(run.first) {
			run.first = at
		}
		if at.After(run.last) {
			run.last = at
		}
		run.steps++
		run.holder[pl.Holder]++
		switch {
		case pl.Holder == "lapsed":
			run.lapsed = true
		case pl.Holder == "live" && run.lapsed:
			run.revived = true
		}
	}
}

// stopReason names what stopped a run: LimitValidFor's 0 while its context lived, or its
// context by the cause's kind.
func stopReason(pl probeLine) string {
	switch {
	case pl.By != "context":
		return pl.By
	case strings.Contains(pl.Cause, "lease lost"):
		return "context, lease lost"
	case strings.Contains(pl.Cause, engine.ErrSlotLost.Error()):
		return "context, slot lost"
	}
	return "context, other"
}

// snapshot copies the runs.
func (l *probeLog) snapshot() []probeRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]probeRun, 0, len(l.runs))
	for _, r := range l.runs {
		c := *r
		out = append(out, c)
	}
	return out
}

// interval is a closed span of time: [from, to].
type interval struct{ from, to time.Time }

// maxOverlap is the most intervals open at one instant; intervals that touch overlap.
func maxOverlap(ivs []interval) int {
	type edge struct {
		at    time.Time
		delta int
	}
	edges := make([]edge, 0, 2*len(ivs))
	for _, iv := range ivs {
		edges = append(edges, edge{iv.from, 1}, edge{iv.to, -1})
	}
	sort.Slice(edges, func(i, j int) bool {
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		return edges[i].delta > edges[j].delta // opens first: closed intervals
	})
	open, most := 0, 0
	for _, e := range edges {
		open += e.delta
		most = max(most, open)
	}
	return most
}

// buildProbe builds chaos/limitprobe.
func buildProbe(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "limitprobe")
	if out, err := exec.Command("go", "build", "-o", bin, "./limitprobe").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// limitsRun is a chaos run of probe processes: what the faults did, and the probe's lines.
type limitsRun struct {
	*run
	log *probeLog
	// pids killed (-9), and when: their runs that never returned end there
	killedMu sync.Mutex
	killed   map[int]time.Time
	// faults that found no worker running a probe job within busyWorker's wait
	missed atomic.Int64
}

func newLimitsRun(t *testing.T, env ...string) *limitsRun {
	srv := redistest.Start(t)
	lr := &limitsRun{log: newProbeLog(), killed: map[int]time.Time{}}
	// RATE_LIMIT=0: the API's own rate limit per tenant is not what is measured.
	lr.run = newRun(&run{t: t, bin: buildProbe(t), redis: srv, rdb: srv.Client(t, 0), env: append([]string{"RATE_LIMIT=0"}, env...), onLine: lr.log.add})
	lr.api = lr.start("api", srv.Addr)
	return lr
}

// holder is a worker running a probe job (any worker, counted missed, when none is within 3 s).
func (lr *limitsRun) holder(take bool) *proc {
	w, held := lr.busyWorker(take)
	if len(held) == 0 {
		lr.missed.Add(1)
	}
	return w
}

// kill kills (-9) a holder and starts a worker in its place.
func (lr *limitsRun) kill() {
	w := lr.holder(true)
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	lr.killedMu.Lock()
	lr.killed[w.cmd.Process.Pid] = time.Now()
	lr.killedMu.Unlock()
	lr.kills.Add(1)
	lr.startWorker()
}

// pause stops a holder (SIGSTOP) for longer than two lease TTLs, then lets it run: its runs wake
// believing in slots that Redis gave to others meanwhile.
func (lr *limitsRun) pause() {
	w := lr.holder(false)
	_ = w.cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(2*leaseTTL + time.Second)
	_ = w.cmd.Process.Signal(syscall.SIGCONT)
	lr.pauses.Add(1)
}

// cut cuts a holder off Redis (its own proxy drops its connections and refuses new ones) for
// longer than two lease TTLs: its slots lapse in Redis while it runs on.
func (lr *limitsRun) cut() {
	w := lr.holder(false)
	w.proxy.Partition(2*leaseTTL + time.Second)
	lr.netFaults.Add(1)
}

// submitPaced submits n probe jobs, perSec a second (16 requests at most in flight), and returns
// once every one has its answer.
func (lr *limitsRun) submitPaced(n, perSec int, body func(i int) string) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	start := time.Now()
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			lr.submit("/jobs/"+probeType, body(i), "")
			lr.submissions.Add(1)
		}()
		time.Sleep(time.Until(start.Add(time.Duration(i+1) * time.Second / time.Duration(perSec))))
	}
	wg.Wait()
}

// ended waits until every accepted job has ended, up to within, and counts them by status; every
// 15 s it logs how many have not.
func (lr *limitsRun) ended(within time.Duration) (byStatus map[string]int, notDone []string) {
	deadline, said := time.Now().Add(within), time.Now()
	for {
		byStatus, notDone = lr.statuses()
		if openJobs(byStatus) == 0 || time.Now().After(deadline) {
			return byStatus, notDone
		}
		if time.Since(said) >= 15*time.Second { // a slow drain says how it goes (a loaded machine)
			lr.t.Logf("%d jobs not ended yet: %v", openJobs(byStatus), byStatus)
			said = time.Now()
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// statuses counts the accepted jobs by status ("lost": no record), and lists those not done.
func (lr *limitsRun) statuses() (byStatus map[string]int, notDone []string) {
	recs := lr.jobRecords("status")
	byStatus = map[string]int{}
	lr.accepted.Range(func(k, _ any) bool {
		s := "lost"
		if f, ok := recs[k.(string)]; ok {
			s, _ = f[0].(string)
		}
		byStatus[s]++
		if s != "done" {
			notDone = append(notDone, k.(string)+" "+s)
		}
		return true
	})
	return byStatus, notDone
}

// openJobs is how many of the counted jobs have not ended.
func openJobs(byStatus map[string]int) int {
	open := 0
	for s, n := range byStatus {
		if !isEnded(s) {
			open += n
		}
	}
	return open
}

// timelineEvents counts events by name across every job's timeline.
func (lr *limitsRun) timelineEvents(names ...string) map[string]int {
	n := map[string]int{}
	for _, k := range scanKeys(lr.rdb, "jobguard:*:job:*") {
		if strings.HasSuffix(k, ":timeline") {
			continue
		}
		evs, _ := engine.ReadTimeline(context.Background(), lr.rdb, k)
		for _, ev := range evs {
			if slices.Contains(names, ev.Event) {
				n[ev.Event]++
			}
		}
	}
	return n
}

// Concurrency 3 per key (two keys, t1 and t2), five worker processes of 4 handlers each, 560 jobs
// of 16 steps of 40 ms submitted over 70 s (more than the 6 slots run: the keys stay full), while
// two holders are killed (-9) and replaced, two paused (SIGSTOP) past two lease TTLs, and two cut
// off Redis past two lease TTLs. It asserts: no instant had more than 3 runs of one key working (a
// run works from its first step to its last, steps logged by every process on one machine's
// clock), and 3 was reached; no sample of Redis's holders (every 20 ms) saw more than 3 live; no
// step found its holder lapsed in Redis, nor live again after that; every job ended done; every
// fault hit a worker running a probe job. Handlers in flight (entered, not returned), paused ones
// included, are reported, not asserted: a paused handler cannot return while stopped, and wakes to
// find its slot gone.
func TestChaosLimitConcurrency(t *testing.T) {
	if os.Getenv("CHAOS") != "limits" {
		t.Skip("set CHAOS=limits (make chaos-limits)")
	}
	const (
		limit    = 3
		workers  = 5
		load     = 70 * time.Second
		perSec   = 8
		steps    = 16
		stepMS   = 40
		faultGap = 9 * time.Second
	)
	wall := time.Now()
	lr := newLimitsRun(t, fmt.Sprintf("TASK_LIMITS=%s=concurrency:%d", probeType, limit))
	for range workers {
		lr.startWorker()
	}
	keys := []string{"t1", "t2"}
	holders := make([]string, len(keys))
	for i, k := range keys {
		holders[i] = engine.LimitHoldersKey(keyspace, probeType, k)
	}
	stop := make(chan struct{})
	watch := lr.watchHolders(stop, holders, limit)

	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		for _, fault := range []func(){lr.kill, lr.pause, lr.cut, lr.kill, lr.pause, lr.cut} {
			time.Sleep(faultGap)
			fault()
		}
	}()
	lr.submitPaced(int(load.Seconds())*perSec, perSec, func(i int) string {
		return fmt.Sprintf(`{"tenant_id":%q,"name":"j-%d","steps":%d,"step_ms":%d}`, keys[i%len(keys)], i, steps, stepMS)
	})
	<-faultsDone
	loadEnd := time.Now()
	atLoadEnd, _ := lr.statuses()
	// Minutes, not seconds: on a loaded machine (two shared cores) the backlog drains slowly.
	byStatus, notDone := lr.ended(6 * time.Minute)
	close(stop)
	end := time.Now()

	// Runs of each key at work at once, and handlers in flight at once.
	working, inFlight := map[string][]interval{}, map[string][]interval{}
	var runs, stepN, lapsedSteps, revived int
	holderStates, stops := map[string]int{}, map[string]int{}
	lr.killedMu.Lock()
	for _, r := range lr.log.snapshot() {
		runs++
		stepN += r.steps
		for s, c := range r.holder {
			holderStates[s] += c
		}
		lapsedSteps += r.holder["lapsed"]
		if r.stoppedBy != "" {
			stops[r.stoppedBy]++
		}
		if r.revived {
			revived++
		}
		if r.steps > 0 {
			working[r.key] = append(working[r.key], interval{r.first, r.last})
		}
		leave := r.leave
		if leave.IsZero() {
			leave = end // still in flight when its process was killed: until the kill
			if at, ok := lr.killed[r.pid]; ok {
				leave = at
			}
		}
		if !r.enter.IsZero() {
			inFlight[r.key] = append(inFlight[r.key], interval{r.enter, leave})
		}
	}
	lr.killedMu.Unlock()
	submitted := lr.submissions.Load()
	accepted := countOrders(&lr.accepted)
	lost := submitted - int64(byStatus["done"])
	evs := lr.timelineEvents("slot_lost", "rescued", "limit_wait", "lease_lost")
	fmt.Printf(`
chaos limits figures (concurrency %d per key, %d worker processes)
| jobs submitted / accepted / done / not done | %d / %d / %d / %d |
| worker kills (-9) / pauses (SIGSTOP %s) / cut-offs (%s) / faults that found no probe job running | %d / %d / %d / %d |
| probe runs / steps | %d / %d |
| steps by what Redis said of the run's slot: live / lapsed / unreached | %d / %d / %d |
| runs whose slot Redis called live again after lapsed | %d |
| runs stopped before their last step, by their context (lease lost / slot lost / other) / by LimitValidFor's 0 with the context live | %d / %d / %d / %d |
| most runs of one key working at once (first to last step, all processes): %s | %s |
| Redis samples of the holders (every 20 ms): samples / most live / over %d | %d / %d / %d |
| handlers in flight at once, paused ones included (entered, not returned; not a bound): %s | %s |
| timeline events: slot_lost / lease_lost / rescued / limit_wait | %d / %d / %d / %d |
| jobs not ended when the load ended / from then to every job ended | %d / %s |
| wall time | %s |
`, limit, workers, submitted, accepted, byStatus["done"], len(notDone),
		2*leaseTTL+time.Second, 2*leaseTTL+time.Second, lr.kills.Load(), lr.pauses.Load(), lr.netFaults.Load(), lr.missed.Load(),
		runs, stepN, holderStates["live"], holderStates["lapsed"], holderStates["unreached"], revived,
		stops["context, lease lost"], stops["context, slot lost"], stops["context, other"], stops["limit_valid_for"],
		strings.Join(keys, " / "), perKey(keys, working), limit, watch.samples.Load(), watch.most.Load(), watch.over.Load(),
		strings.Join(keys, " / "), perKey(keys, inFlight),
		evs["slot_lost"], evs["lease_lost"], evs["rescued"], evs["limit_wait"], openJobs(atLoadEnd), end.Sub(loadEnd).Round(100*time.Millisecond), time.Since(wall).Round(time.Second))

	for _, k := range keys {
		if got := maxOverlap(working[k]); got > limit {
			t.Errorf("invariant: %d runs of key %s worked at once; the limit is %d", got, k, limit)
		} else if got < limit {
			t.Errorf("key %s never had %d runs working at once (most %d): the load did not reach the limit", k, limit, got)
		}
	}
	if n := watch.over.Load(); n > 0 || watch.samples.Load() == 0 {
		t.Errorf("invariant: %d of %d samples saw a key with more than %d live holders", n, watch.samples.Load(), limit)
	}
	if lapsedSteps > 0 || revived > 0 {
		t.Errorf("invariant: %d steps found their slot lapsed in Redis; %d runs' slots came back after", lapsedSteps, revived)
	}
	if lost != 0 || len(notDone) > 0 || int64(accepted) != submitted {
		t.Errorf("invariant: %d jobs submitted, %d accepted, %d done; not done: %v", submitted, accepted, byStatus["done"], first(notDone, 10))
	}
	if lr.kills.Load() != 2 || lr.pauses.Load() != 2 || lr.netFaults.Load() != 2 || lr.missed.Load() > 0 {
		t.Errorf("faults: %d kills, %d pauses, %d cut-offs (want 2 each), %d found no probe job running",
			lr.kills.Load(), lr.pauses.Load(), lr.netFaults.Load(), lr.missed.Load())
	}
}

// A rate of 10 starts per second of one key on three worker processes, for over a minute: 660
// jobs submitted at 12 a second. Sorting the starts the rate granted (Redis's clock, from each
// run's Job.LimitStart), no window [i..j] holds more than rate × its span + 1 starts; the starts
// span at least 60 s, and the achieved rate is reported.
func TestChaosLimitRate(t *testing.T) {
	if os.Getenv("CHAOS") != "limits" {
		t.Skip("set CHAOS=limits (make chaos-limits)")
	}
	const (
		rate    = 10
		workers = 3
		jobs    = 660
		perSec  = 12
	)
	wall := time.Now()
	lr := newLimitsRun(t, fmt.Sprintf("TASK_LIMITS=%s=concurrency:0,rate:%d/1s", probeType, rate))
	for range workers {
		lr.startWorker()
	}
	lr.submitPaced(jobs, perSec, func(i int) string {
		return fmt.Sprintf(`{"tenant_id":"r1","name":"j-%d","steps":0,"step_ms":0}`, i)
	})
	byStatus, notDone := lr.ended(3 * time.Minute)

	var starts []int64
	for _, r := range lr.log.snapshot() {
		if !r.enter.IsZero() {
			starts = append(starts, r.startMS)
		}
	}
	slices.Sort(starts)
	worst, windowed := worstWindow(starts, rate)
	var span time.Duration
	if len(starts) > 1 {
		span = time.Duration(starts[len(starts)-1]-starts[0]) * time.Millisecond
	}
	achieved := float64(len(starts)-1) / span.Seconds()
	firstMinute, gaps := startsProfile(starts, time.Minute)
	fmt.Printf(`
chaos limits figures (rate %d per second of one key, %d worker processes)
| jobs submitted / done / not done | %d / %d / %d |
| starts seen (handlers entered) | %d |
| span of the starts (Redis's clock) / achieved rate | %s / %.2f per second |
| starts in the first minute / gaps between starts over 150 ms (the 3 longest) | %d / %d (%s) |
| worst window: starts above rate × span + 1 (<= 0 holds) / windows checked | %.2f / %d |
| wall time | %s |
`, rate, workers, lr.submissions.Load(), byStatus["done"], len(notDone), len(starts), span.Round(time.Millisecond), achieved,
		firstMinute, len(gaps), strings.Join(first(gaps, 3), ", "), worst, windowed, time.Since(wall).Round(time.Second))
	if worst > 1e-9 {
		t.Errorf("invariant: a window held %.2f starts more than %d × its span + 1", worst, rate)
	}
	if span < time.Minute {
		t.Errorf("the starts spanned %s: under the minute the test is for", span)
	}
	if len(notDone) > 0 || int64(byStatus["done"]) != lr.submissions.Load() || len(starts) < jobs {
		t.Errorf("invariant: %d submitted, %d done, %d starts seen; not done: %v", lr.submissions.Load(), byStatus["done"], len(starts), first(notDone, 10))
	}
}

// worstWindow is, over every window [i..j] of the sorted starts (unix ms), the most starts above
// rate × the window's span + 1 (<= 0: the rate held), and how many windows there were.
func worstWindow(starts []int64, rate int) (worst float64, windows int) {
	worst = math.Inf(-1)
	for i := range starts {
		for j := i; j < len(starts); j++ {
			span := float64(starts[j]-starts[i]) / 1000
			worst = math.Max(worst, float64(j-i+1)-(float64(rate)*span+1))
			windows++
		}
	}
	return worst, windows
}

// startsProfile counts the sorted starts (unix ms) in the first d after the first, and lists the
// gaps between consecutive starts longer than 1.5 emission intervals of 10 a second, longest
// first, with when they came ("+61.2s: 900ms").
func startsProfile(starts []int64, d time.Duration) (within int, gaps []string) {
	type gap struct{ at, len int64 }
	var gs []gap
	for i, s := range starts {
		if s-starts[0] < d.Milliseconds() {
			within++
		}
		if i > 0 && s-starts[i-1] > 150 {
			gs = append(gs, gap{starts[i-1] - starts[0], s - starts[i-1]})
		}
	}
	sort.Slice(gs, func(i, j int) bool { return gs[i].len > gs[j].len })
	for _, g := range gs {
		gaps = append(gaps, fmt.Sprintf("+%.1fs: %dms", float64(g.at)/1000, g.len))
	}
	return within, gaps
}

// perKey says each key's most overlapping intervals, in the order of keys ("3 / 3").
func perKey(keys []string, ivs map[string][]interval) string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = fmt.Sprint(maxOverlap(ivs[k]))
	}
	return strings.Join(out, " / ")
}

// first is at most n of xs.
func first(xs []string, n int) []string { return xs[:min(n, len(xs))] }
