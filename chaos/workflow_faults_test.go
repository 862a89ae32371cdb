package chaos

import (
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

// pauseMidRun stops a worker (SIGSTOP) for twice the lease TTL and a second, then resumes it. Its
// Redis traffic is slowed first (300 ms a chunk, through its own proxy) so that the jobs it runs
// are inside their handlers when it stops, not between two: once resumed, their next writes (the
// effect, the finish) come from runs whose leases lapsed and were rescued elsewhere, and the fence
// must refuse them.
func (r *run) pauseMidRun(f *wfFaults) {
	w, _ := r.busyWorker(false)
	w.proxy.SetLatency(300 * time.Millisecond)
	time.Sleep(time.Second)
	_ = w.cmd.Process.Signal(syscall.SIGSTOP)
	f.caught.Add(int64(len(r.heldBy(w))))
	time.Sleep(2*leaseTTL + time.Second)
	_ = w.cmd.Process.Signal(syscall.SIGCONT)
	time.Sleep(time.Second) // its late writes go out at the slow pace, then the proxy is fast again
	w.proxy.SetLatency(0)
	f.pauses.Add(1)
}
