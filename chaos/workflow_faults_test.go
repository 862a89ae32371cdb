package chaos

import (
	"bytes"
	"math/rand/v2"
	"sync/atomic"
	"syscall"
	"time"
)

// wfFaults are the faults TestChaosWorkflows injects and what they caught.
type wfFaults struct {
	kills, pauses, restarts atomic.Int64
	// caught counts the jobs a paused worker was running when it stopped.
	caught atomic.Int64
	// last is when the last fault ended (unix ns).
	last atomic.Int64
	// logged counts lateEvents in the processes' logs; staleTokens the log lines of a handler's
	// write refused by the fence (locking.StaleError, as the reserve-stock effect returns it).
	logged      [2]atomic.Int64
	staleTokens atomic.Int64
}

// wfFaultCycle is one round of faults: mostly kills, a pause past the lease and a Redis restart.
func (r *run) wfFaultCycle(f *wfFaults) []func() {
	kill := func() { r.killBusy(f) }
	return []func(){kill, kill, func() { r.pauseMidRun(f) }, kill, kill, func() { r.restartRedis(); f.restarts.Add(1) }, kill}
}

// injectWorkflowFaults runs fault cycles, one fault every 0.5 to 1.5 s, until stop closes.
func (r *run) injectWorkflowFaults(f *wfFaults, stop <-chan struct{}) {
	for {
		for _, fault := range r.wfFaultCycle(f) {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(500+rand.IntN(1000)) * time.Millisecond):
			}
			fault()
			f.last.Store(time.Now().UnixNano())
		}
	}
}

// killBusy kills (-9) a worker running a job and starts another.
func (r *run) killBusy(f *wfFaults) {
	w, _ := r.busyWorker(true)
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	f.kills.Add(1)
	r.startWorker()
}

// pauseMidRun stops a worker running a job (SIGSTOP) for twice the lease TTL and a second, then
// resumes it. Its Redis traffic is held back for longer than a lease (through its own proxy) from
// just before it stops until it resumes: a write its handlers sent in their last moments lands
// after their leases lapsed and the jobs were rescued elsewhere, and the fence must refuse it;
// what they try once resumed must be stopped by the lapsed lease or refused by the fence.
func (r *run) pauseMidRun(f *wfFaults) {
	w, _ := r.busyWorker(false)
	w.proxy.SetLatency(2*leaseTTL + time.Second) // what it sent lands after its jobs were rescued and run again
	time.Sleep(100 * time.Millisecond)
	_ = w.cmd.Process.Signal(syscall.SIGSTOP)
	f.caught.Add(int64(len(r.heldBy(w))))
	time.Sleep(2*leaseTTL + time.Second)
	_ = w.cmd.Process.Signal(syscall.SIGCONT)
	time.Sleep(time.Second) // what it sends once resumed is late too
	w.proxy.SetLatency(0)
	f.pauses.Add(1)
}

// lateEvents are the worker log events that say a late run was stopped (lease_lost: a run that
// also failed a renewal logs lease_renew_failed besides) or its finish refused.
var lateEvents = []string{"lease_lost", "stale_write_rejected"}

// countLateEvents counts lateEvents in every process's log.
func (f *wfFaults) countLateEvents(_ *proc, line []byte) {
	for i, ev := range lateEvents {
		if bytes.Contains(line, []byte(`"event":"`+ev+`"`)) {
			f.logged[i].Add(1)
		}
	}
	if bytes.Contains(line, []byte("stale fencing token")) {
		f.staleTokens.Add(1)
	}
}
