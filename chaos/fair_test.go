package chaos

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/redistest"
)

// Sequences under faults (make chaos-fair, CHAOS=fair): jobguard's own binary, an API and three
// workers on a Redis with AOF (appendfsync always); rebuild-cache is a fair sequence per tenant
// (TASK_LIMITS=rebuild-cache=sequence:on). CHAOS_FAIR_KEYS tenants (default 100) each submit
// CHAOS_FAIR_JOBS jobs (default 50) in order while, every 0.5-1.5 s, a worker running a job is
// killed (-9) or paused past the lease (SIGSTOP), or Redis is killed and restarted from its AOF.
// CHAOS_FAIR_SHARDS spreads the type's admission state over that many shards (default 1).
// Checked once every job has ended: every accepted job done (0 lost, 0 stuck), and per key each
// job's first run started after its predecessor's done (0 order inversions, 0 overlaps).
func TestChaosFair(t *testing.T) {
	if os.Getenv("CHAOS") != "fair" {
		t.Skip("set CHAOS=fair (make chaos-fair)")
	}
	keys, perKey := envCount("CHAOS_FAIR_KEYS", 100), envCount("CHAOS_FAIR_JOBS", 50)
	bin := filepath.Join(t.TempDir(), "jobguard")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/jobguard").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	limits := "TASK_LIMITS=rebuild-cache=sequence:on,capacity:12"
	if n := envCount("CHAOS_FAIR_SHARDS", 1); n > 1 {
		limits += fmt.Sprintf(",shards:%d", n)
	}
	r := newRun(&run{t: t, bin: bin, redis: srv, rdb: srv.Client(t, 0), env: []string{"RATE_LIMIT=0", limits}})
	r.api = r.start("api", srv.Addr)
	for range 3 {
		r.startWorker()
	}

	stop := make(chan struct{})
	var faults sync.WaitGroup
	faults.Add(1)
	go func() {
		defer faults.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(500+rand.IntN(1000)) * time.Millisecond):
			}
			switch i % 3 {
			case 0:
				w, _ := r.busyWorker(true)
				_ = w.cmd.Process.Signal(syscall.SIGKILL)
				r.kills.Add(1)
				r.startWorker()
			case 2:
				w, _ := r.busyWorker(false)
				_ = w.cmd.Process.Signal(syscall.SIGSTOP)
				time.Sleep(2*leaseTTL + time.Second)
				_ = w.cmd.Process.Signal(syscall.SIGCONT)
				r.pauses.Add(1)
			case 1:
				r.restartRedis()
			}
		}
	}()

	// Each key's jobs, submitted in order (one after another per key, keys interleaved).
	ids := make([][]string, keys)
	for j := range perKey {
		for k := range keys {
			body := fmt.Sprintf(`{"tenant_id":"k%d","resource_id":"s%d-%d"}`, k, k, j)
			id, code := r.submit("/jobs/rebuild-cache", body, fmt.Sprintf("fair-%d-%d", k, j))
			if code != 202 && code != 200 {
				t.Fatalf("submit k%d #%d: %d", k, j, code)
			}
			ids[k] = append(ids[k], id)
		}
	}

	// Every job ends, under the faults for a while, then without.
	views := map[string]jobView{}
	deadline := time.Now().Add(4 * time.Minute)
	faultsStopped := false
	for {
		pending := 0
		for _, list := range ids {
			for _, id := range list {
				if v, ok := views[id]; ok && v.Status == "done" {
					continue
				}
				var v jobView
				if getJSON(r.api.addr, "/jobs/"+id, &v) == 200 {
					views[id] = v
				}
				if views[id].Status != "done" {
					pending++
				}
			}
		}
		if pending == 0 || time.Now().After(deadline) {
			if pending > 0 {
				t.Errorf("%d jobs not done (lost or stuck) within the deadline", pending)
				r.reportStuck(ids, views)
			}
			break
		}
		if !faultsStopped && time.Now().After(deadline.Add(-2*time.Minute)) {
			close(stop)
			faults.Wait()
			faultsStopped = true
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !faultsStopped {
		close(stop)
		faults.Wait()
	}

	inversions, overlaps, checked := 0, 0, 0
	for k, list := range ids {
		for j := 1; j < len(list); j++ {
			prev, cur := views[list[j-1]], views[list[j]]
			prevDone, curStart, prevStart := eventAt(prev, "done", true), eventAt(cur, "lease_acquired", false), eventAt(prev, "lease_acquired", false)
			if curStart > 0 && prevDone > 0 && prevStart > 0 {
				checked++
			}
			if curStart > 0 && prevStart > 0 && curStart < prevStart {
				inversions++
				t.Errorf("k%d: job %d started before job %d", k, j, j-1)
			}
			if curStart > 0 && prevDone > 0 && curStart < prevDone {
				overlaps++
				t.Errorf("k%d: job %d started at %d, before job %d's done at %d", k, j, curStart, j-1, prevDone)
			}
		}
	}
	if r.kills.Load() == 0 || r.pauses.Load() == 0 || r.restarts.Load() == 0 {
		t.Errorf("the run ended before one fault of each kind (kills %d, pauses %d, restarts %d): more jobs (CHAOS_FAIR_JOBS)",
			r.kills.Load(), r.pauses.Load(), r.restarts.Load())
	}
	if want := keys * (perKey - 1); checked != want {
		t.Errorf("checked %d pairs of consecutive jobs, want %d (a timeline without its start or done)", checked, want)
	}
	t.Logf("%d keys x %d jobs; %d kills, %d pauses past the lease, %d Redis restarts (AOF); %d order inversions, %d overlaps",
		keys, perKey, r.kills.Load(), r.pauses.Load(), r.restarts.Load(), inversions, overlaps)
}

// eventAt is the time of the job's first (or, last, last) event named name; 0 none.
func eventAt(v jobView, name string, last bool) int64 {
	var at int64
	for _, e := range v.Timeline {
		if e.Event == name && (at == 0 || last) {
			at = e.At
		}
	}
	return at
}

func envCount(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
