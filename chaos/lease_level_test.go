package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/redistest"
)

// leaseApp is one process of examples/asynqapp.
type leaseApp struct {
	cmd       *exec.Cmd
	lastStart atomic.Int64 // when it last logged a reservation's start (unix ns)
}

// reservationWork is how long a reservation works (WORK_TIME): a worker that started one less
// than busyWithin ago is still in it, so a fault on it lands mid-run.
const (
	reservationWork = 400 * time.Millisecond
	busyWithin      = 250 * time.Millisecond
)

// leaseRun is a chaos run of the example application at lease level.
type leaseRun struct {
	t                       *testing.T
	bin                     string
	redis                   *redistest.Server
	mu                      sync.Mutex
	workers                 []*leaseApp
	rescues                 atomic.Int64
	accepted                atomic.Int64
	refusals                atomic.Int64 // enqueues that got an error (Redis down): their outcome is unknown
	refused                 sync.Map     // task ID -> struct{}: an error reply, but Redis may have written the task first
	acked                   sync.Map     // task ID -> struct{}: acknowledged
	kills, pauses, restarts atomic.Int64
}

func (r *leaseRun) startWorker() {
	r.t.Helper()
	cmd := exec.Command(r.bin)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"REDIS_URL=redis://" + r.redis.Addr + "/0", "LEASE_TTL=" + leaseTTL.String(), "WORK_TIME=" + reservationWork.String(), "CONCURRENCY=4"}
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	started := make(chan struct{}, 1)
	w := &leaseApp{cmd: cmd}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var ev struct{ Message, Event string }
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				continue
			}
			switch {
			case ev.Message == "asynqapp started":
				started <- struct{}{}
			case ev.Message == "reservation started":
				w.lastStart.Store(time.Now().UnixNano())
			case ev.Event == "rescued":
				r.rescues.Add(1)
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		r.t.Fatal("asynqapp did not start")
	}
	r.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	r.mu.Lock()
	r.workers = append(r.workers, w)
	r.mu.Unlock()
}

// victim takes a worker out of the pool for a fault: one in the middle of a reservation, so the
// fault leaves a run to rescue (a worker chosen blindly is idle often enough that a whole run's
// faults can miss every reservation), or the oldest if none is found within a few seconds.
func (r *leaseRun) victim() *leaseApp {
	r.mu.Lock()
	defer r.mu.Unlock()
	for give := time.Now().Add(5 * time.Second); time.Now().Before(give); {
		for i, w := range r.workers {
			if time.Since(time.Unix(0, w.lastStart.Load())) < busyWithin {
				r.workers = slices.Delete(r.workers, i, i+1)
				return w
			}
		}
		r.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
		r.mu.Lock()
	}
	r.t.Logf("no worker was mid-reservation: the fault takes the oldest")
	w := r.workers[0]
	r.workers = r.workers[1:]
	return w
}

func (r *leaseRun) kill() {
	w := r.victim()
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	r.kills.Add(1)
	r.startWorker()
}

func (r *leaseRun) pause() {
	w := r.victim()
	_ = w.cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(2*leaseTTL + time.Second) // past its leases: its tasks are rescued meanwhile
	_ = w.cmd.Process.Signal(syscall.SIGCONT)
	r.pauses.Add(1)
	r.mu.Lock()
	r.workers = append(r.workers, w)
	r.mu.Unlock()
}

func (r *leaseRun) restartRedis() {
	r.redis.Kill()
	time.Sleep(time.Second)
	if err := r.redis.Restart(); err != nil {
		r.t.Errorf("redis restart: %v", err)
	}
	r.restarts.Add(1)
}

// produce enqueues reservations with a plain asynq client, as the application's producers do,
// recording which Redis acknowledged. Each has a known task ID (the lease level's op key): an
// enqueue whose reply was lost when Redis was killed may still have been written to the AOF, so
// a refused one may be applied (once) too.
func (r *leaseRun) produce(client *asynq.Client, n, skus int, over time.Duration) {
	tick := over / time.Duration(n)
	for i := 0; i < n; i++ {
		payload, _ := json.Marshal(map[string]any{"sku": "s" + strconv.Itoa(i%skus), "qty": 1})
		id := "res-" + strconv.Itoa(i)
		if _, err := client.Enqueue(asynq.NewTask("stock:reserve", payload), asynq.TaskID(id)); err != nil {
			r.refusals.Add(1)
			r.refused.Store(id, struct{}{})
		} else {
			r.accepted.Add(1)
			r.acked.Store(id, struct{}{})
		}
		time.Sleep(tick)
	}
}

// TestChaosLeaseLevel runs examples/asynqapp (plain asynq, jobguard's middleware at lease level)
// under worker kills (-9), a pause past the lease and a Redis restart (AOF always): every
// acknowledged reservation is applied exactly once, none is archived, lost or stuck.
func TestChaosLeaseLevel(t *testing.T) {
	if v := os.Getenv("CHAOS"); v != "short" && v != "lease" {
		t.Skip("set CHAOS=lease (make chaos)")
	}
	wall := time.Now()
	bin := filepath.Join(t.TempDir(), "asynqapp")
	if out, err := exec.Command("go", "build", "-o", bin, "../examples/asynqapp").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	r := &leaseRun{t: t, bin: bin, redis: srv}
	for range 3 {
		r.startWorker()
	}
	rdb := srv.Client(t, 0)
	client := asynq.NewClientFromRedisClient(rdb)
	const jobs, skus = 600, 30
	done := make(chan struct{})
	go func() { r.produce(client, jobs, skus, 35*time.Second); close(done) }()
	for _, fault := range []struct {
		at time.Duration
		do func()
	}{{5 * time.Second, r.kill}, {11 * time.Second, r.pause}, {20 * time.Second, r.restartRedis}, {27 * time.Second, r.kill}} {
		time.Sleep(time.Until(wall.Add(fault.at)))
		fault.do()
	}
	<-done
	applied := func() int64 {
		var sum int64
		for i := range skus {
			n, _ := rdb.HGet(context.Background(), fmt.Sprintf("shop:{sku:s%d}:stock", i), "reserved").Int64()
			sum += n
		}
		return sum
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	// asynq's own recovery of a killed worker's originals (30 s task lease, 1-minute recoverer)
	// bounds the drain: they are acknowledged without running once they come back.
	deadline := time.Now().Add(150 * time.Second)
	for {
		qi, err := insp.GetQueueInfo("default")
		if err == nil && qi.Pending+qi.Active+qi.Scheduled+qi.Retry == 0 && applied() >= r.accepted.Load() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not drained: %+v, applied %d of %d", qi, applied(), r.accepted.Load())
		}
		time.Sleep(500 * time.Millisecond)
	}
	arch, _ := insp.ListArchivedTasks("default")
	appliedRecords := len(scanKeys(rdb, "shop:{sku:*}:applied:*"))
	t.Logf("lease level: %d reservations acknowledged (%d refused while Redis was down), %d applied, %d applied records, "+
		"%d archived; faults: %d kills, %d pauses, %d Redis restarts; %d rescues; %s",
		r.accepted.Load(), r.refusals.Load(), applied(), appliedRecords, len(arch), r.kills.Load(), r.pauses.Load(),
		r.restarts.Load(), r.rescues.Load(), time.Since(wall).Round(time.Second))
	r.checkApplied(applied(), scanKeys(rdb, "shop:{sku:*}:applied:*"))
	if len(arch) != 0 {
		t.Errorf("%d reservations archived", len(arch))
	}
	if r.rescues.Load() == 0 {
		t.Errorf("no rescue: the faults did not hit a running reservation")
	}
}

// checkApplied holds the run to exactly once: every acknowledged reservation applied, none twice
// (one applied record per unit of stock), and nothing applied that was never enqueued (a refused
// enqueue may be, its reply lost with the Redis that wrote it).
func (r *leaseRun) checkApplied(applied int64, records []string) {
	r.t.Helper()
	seen := map[string]bool{}
	lateWrites := 0
	for _, k := range records {
		id := k[strings.LastIndex(k, ":applied:")+len(":applied:"):]
		seen[id] = true
		if _, ok := r.acked.Load(id); ok {
			continue
		}
		if _, ok := r.refused.Load(id); ok {
			lateWrites++
			continue
		}
		r.t.Errorf("applied record %s: no such reservation was enqueued", k)
	}
	r.acked.Range(func(id, _ any) bool {
		if !seen[id.(string)] {
			r.t.Errorf("acknowledged reservation %s was not applied", id)
		}
		return true
	})
	if applied != int64(len(records)) {
		r.t.Errorf("%d units reserved for %d applied records: %d applied twice or lost", applied, len(records), applied-int64(len(records)))
	}
	r.t.Logf("%d refused enqueues were written before Redis died and applied once", lateWrites)
}
