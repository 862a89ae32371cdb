package chaos

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/schedule"
)

// The chaos run's schedule: a rebuild of t1/tick every second, on every worker (one leads). Overlap
// allow, so that no tick is skipped because the previous one is still rebuilding; catch-up all, so
// that a tick no leader reached within the grace still gets its job (up to schedule.MaxCatchUp of
// them, far more than any leader-less window of the run).
const (
	tickSchedule = "chaos-tick"
	tickResource = "tick"
	tickEvery    = time.Second
)

var scheduleEnv = `SCHEDULES=[{"name":"` + tickSchedule + `","spec":"@every 1s","type":"rebuild-cache",` +
	`"payload":{"tenant_id":"t1","resource_id":"` + tickResource + `"},"overlap":"allow","catchup":"all"}]`

// scheduleKey is a key of the schedule's own slot (its state hash "schedule").
func scheduleKey(name string) string {
	return "jobguard:{" + engine.ResourceTag("schedule:"+tickSchedule) + "}:" + name
}

// cursor is the schedule's cursor (the last tick dealt with); zero before a leader first saw it.
func (r *run) cursor() time.Time {
	ms, err := r.rdb.HGet(context.Background(), scheduleKey("schedule"), "cursor").Int64()
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// leader is the worker holding the scheduler lease (its owner is "<worker id>:<random>", the
// worker id "<host>-<pid>"), nil when none does or it is not one of the pool.
func (r *run) leader() *proc {
	owner, err := r.rdb.Get(context.Background(), "jobguard:{scheduler}:lock").Result() // locking's key of lease "scheduler"
	if err != nil {
		return nil
	}
	i := strings.LastIndex(owner, ":")
	if i < 0 {
		return nil
	}
	pid, err := strconv.Atoi(owner[strings.LastIndex(owner[:i], "-")+1 : i])
	if err != nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.workers {
		if w.cmd.Process.Pid == pid {
			return w
		}
	}
	return nil
}

// waitLeader waits (generously: a leader change takes about a lease TTL, longer on a loaded
// machine) for the scheduler's leader; take removes it from the pool.
func (r *run) waitLeader(take bool) *proc {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if w := r.leader(); w != nil {
			if take {
				r.takeWorker(w)
			}
			return w
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.t.Logf("no scheduler leader for 20 s: fault skipped")
	return nil
}

// leaderKill kills the scheduler's leader (-9) and starts a worker in its place.
func (r *run) leaderKill() {
	w := r.waitLeader(true)
	if w == nil {
		return
	}
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	r.leaderKills.Add(1)
	r.startWorker()
}

// leaderPause stops the leader (SIGSTOP) past its lease, then lets it run: it wakes believing in
// its lease for a moment, while another leads.
func (r *run) leaderPause() {
	w := r.waitLeader(false)
	if w == nil {
		return
	}
	_ = w.cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(2*leaseTTL + time.Second)
	_ = w.cmd.Process.Signal(syscall.SIGCONT)
	r.leaderPauses.Add(1)
}

// leaderCut cuts the leader off Redis (its own fault proxy drops every connection and refuses
// new ones) past its lease, then lets it back.
func (r *run) leaderCut() {
	w := r.waitLeader(false)
	if w == nil {
		return
	}
	w.proxy.Partition(2*leaseTTL + time.Second)
	r.leaderCuts.Add(1)
}

// redisStall stops Redis (SIGSTOP) for longer than a lease TTL: commands wait in the kernel's
// buffers, and every lease has lapsed when it runs again.
func (r *run) redisStall() {
	r.redisMu.Lock()
	defer r.redisMu.Unlock()
	if err := r.redis.Pause(); err != nil {
		r.t.Errorf("redis pause: %v", err)
		return
	}
	time.Sleep(leaseTTL + time.Second)
	if err := r.redis.Resume(); err != nil {
		r.t.Errorf("redis resume: %v", err)
	}
	r.stalls.Add(1)
}

// scheduleFaults runs the faults aimed at the scheduler, spread over the run, between the others.
func (r *run) scheduleFaults(duration time.Duration, done chan<- struct{}) {
	defer close(done)
	cycle := []func(){r.leaderKill, r.leaderPause, r.leaderCut, r.redisStall}
	// These take about 15 s per cycle (two hold for 5 s, the stall for 3 s), so one fits a short run.
	step := min((duration-25*time.Second)/time.Duration(len(cycle)+1), 90*time.Second/time.Duration(len(cycle)))
	time.Sleep(step / 2) // off the beat of the other faults
	end := time.Now().Add(duration - step/2)
	for time.Now().Before(end) {
		for _, fault := range cycle {
			time.Sleep(step)
			if time.Now().After(end) {
				return
			}
			fault()
		}
	}
}

// pauseSchedule pauses the schedule through the API (an operator route; the chaos API is open),
// so that the run can end: its answer ends the window of ticks that must have jobs.
func (r *run) pauseSchedule() time.Time {
	client := &http.Client{Timeout: 5 * time.Second}
	for try := 0; try < 40; try++ {
		resp, err := client.Post("http://"+r.api.addr+"/schedules/"+tickSchedule+"/pause", "application/json", nil)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Now()
			}
			r.t.Logf("pause schedule: %s", resp.Status)
		}
		time.Sleep(250 * time.Millisecond)
	}
	r.t.Errorf("the schedule could not be paused")
	return time.Now()
}

// scheduleFigures is what the schedule did in the run.
type scheduleFigures struct {
	expected, created, duplicates, missing int
	tail                                   time.Duration // from the last tick with a job to the pause's answer
	notTicks, createdTwice, ranTwice       int
}

// checkSchedule counts the schedule's ticks from the first cursor (the first leader's start) to
// the last tick with a job, and their jobs: each tick of the window must have exactly one job.
// The window ends at the last tick with a job since a tick after it, before the pause landed, is
// counted as paused by the leader (not created, and rightly so).
func (r *run) checkSchedule(start, pausedAt time.Time) scheduleFigures {
	ctx := context.Background()
	var f scheduleFigures
	resource := "t1:" + tickResource
	prefix := "jobguard:{" + engine.ResourceTag(resource) + "}:job:"
	jobs := map[int64]string{} // tick (unix ms) -> job id
	var last time.Time
	for _, k := range scanKeys(r.rdb, prefix+"*") {
		if strings.HasSuffix(k, ":timeline") {
			continue
		}
		id := strings.TrimPrefix(k, prefix)
		at, ok := tickOf(id)
		if !ok || id != schedule.TickJobID(tickSchedule, resource, at) {
			f.notTicks++ // a job on the tick's resource that is no tick's job
			continue
		}
		jobs[at.UnixMilli()] = id
		if at.After(last) {
			last = at
		}
		var enqueued, done int
		for _, e := range r.rdb.LRange(ctx, k+":timeline", 0, -1).Val() {
			enqueued += strings.Count(e, `"event":"enqueued"`)
			done += strings.Count(e, `"event":"done"`)
		}
		if enqueued > 1 {
			f.createdTwice++
		}
		if done > 1 {
			f.ranTwice++
		}
	}
	for at := start.Truncate(tickEvery).Add(tickEvery); !at.After(last); at = at.Add(tickEvery) {
		f.expected++
		if _, ok := jobs[at.UnixMilli()]; ok {
			f.created++
		} else {
			f.missing++
		}
	}
	f.duplicates = f.notTicks + f.createdTwice + f.ranTwice
	if !last.IsZero() {
		f.tail = pausedAt.Sub(last)
	}
	return f
}

// scheduleInvariants fails the run on any duplicate and on any missing tick (catch-up all
// creates up to schedule.MaxCatchUp missed ticks, and no window of the run is without a leader
// for that long), and when the schedule stopped creating jobs well before the pause.
func (r *run) scheduleInvariants(f scheduleFigures) {
	t := r.t
	if f.duplicates > 0 {
		t.Errorf("invariant: schedule duplicates: %d jobs that are no tick's, %d ticks enqueued twice, %d ticks done twice", f.notTicks, f.createdTwice, f.ranTwice)
	}
	if f.missing > 0 {
		t.Errorf("invariant: %d of %d ticks have no job (bound 0: catch-up all)", f.missing, f.expected)
	}
	if f.expected == 0 {
		t.Errorf("invariant: the schedule created no job")
	}
	// A leader change takes about a lease TTL, a tick older than the grace (2×LEASE_TTL+10s) is
	// still created by catch-up all: a tail this long is a scheduler that stopped.
	if f.tail > 60*time.Second {
		t.Errorf("invariant: the schedule's last job is for a tick %s before the pause", f.tail.Round(time.Second))
	}
}

// tickOf is the tick time a schedule job id carries (its tag, '-', 12 hex digits of unix ms).
func tickOf(id string) (time.Time, bool) {
	if len(id) < 29 || id[16] != '-' {
		return time.Time{}, false
	}
	ms, err := strconv.ParseInt(id[17:29], 16, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

func (f scheduleFigures) String() string {
	return fmt.Sprintf("%d / %d / %d / %d", f.expected, f.created, f.duplicates, f.missing)
}
