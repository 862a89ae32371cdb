package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/faultproxy"
	"github.com/jobguard/jobguard/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

const leaseTTL = 2 * time.Second

// proc is one jobguard process.
type proc struct {
	role  string
	cmd   *exec.Cmd
	addr  string
	proxy *faultproxy.Proxy // a worker's own, between it and Redis (or the shared proxy)
}

// run is one chaos run: its processes, Redis, upstream and what happened.
type run struct {
	t       *testing.T
	bin     string
	redis   *redistest.Server
	rdb     redis.UniversalClient
	env     []string          // extra environment for the processes (REDIS_MODE, REDIS_URL), last wins
	proxy   *faultproxy.Proxy // the faulty proxy every third worker goes through (nil: none)
	up      *httptest.Server  // the rebuild source (nil: none)
	api     *proc
	mu      sync.Mutex
	workers []*proc
	nextID  int
	// onLine, when set, sees every line a process writes on stderr (from several goroutines).
	onLine func(p *proc, line []byte)

	// figures
	submissions, duplicates, kills, pauses, restarts, netFaults, sigterms atomic.Int64
	// faults aimed at the scheduler: its leader killed, paused, cut off; Redis stalled
	leaderKills, leaderPauses, leaderCuts, stalls atomic.Int64
	redisMu                                       sync.Mutex // one Redis fault at a time
	// conflicting resubmissions: the same order id with another sku or quantity
	conflicts, conflictsRefused, conflictsAccepted atomic.Int64
	resumed, finished                              []time.Duration
	tokenWentBack                                  atomic.Int64

	// accepted orders: "tenant/order" -> sku and quantity
	orders   sync.Map
	accepted sync.Map // job ids the API accepted

	cancels cancels // what the run cancelled and the answers
}

type order struct {
	tenant, sku string
	qty         int
}

func (r *run) start(role string, redisAddr string) *proc {
	r.t.Helper()
	cmd := exec.Command(r.bin, role)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"REDIS_URL=redis://" + redisAddr + "/0", "HTTP_ADDR=127.0.0.1:0", "LEASE_TTL=" + leaseTTL.String(),
		"RESCUE_INTERVAL=500ms", "WORKER_CONCURRENCY=4", "SHUTDOWN_TIMEOUT=3s", "LOG_LEVEL=info",
	}
	if r.up != nil {
		cmd.Env = append(cmd.Env, "REBUILD_SOURCE_URL="+r.up.URL)
	}
	cmd.Env = append(cmd.Env, r.env...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	p := &proc{role: role, cmd: cmd}
	started := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if r.onLine != nil {
				r.onLine(p, sc.Bytes())
			}
			var ev struct{ Message, Addr string }
			if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Message == "jobguard started" {
				started <- ev.Addr
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case p.addr = <-started:
	case <-time.After(30 * time.Second):
		r.t.Fatalf("%s did not start", role)
	}
	r.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return p
}

// startWorker starts a worker; every third one reaches Redis through the faulty proxy. Each has
// a proxy of its own too, so that one worker (the scheduler's leader) can be cut off.
func (r *run) startWorker() {
	r.mu.Lock()
	viaProxy := r.proxy != nil && r.nextID%3 == 0
	r.nextID++
	r.mu.Unlock()
	addr := r.redis.Addr
	if viaProxy {
		addr = r.proxy.Addr()
	}
	own, err := faultproxy.New(addr)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(own.Close)
	w := r.start("worker", own.Addr())
	w.proxy = own
	r.mu.Lock()
	r.workers = append(r.workers, w)
	r.mu.Unlock()
}

// busyWorker picks a worker that is running a job (waiting up to 3 s for one), so that faults hit
// work in flight; any worker otherwise. take removes it from the pool.
func (r *run) busyWorker(take bool) (*proc, map[string]string) {
	deadline := time.Now().Add(3 * time.Second)
	for {
		r.mu.Lock()
		ws := append([]*proc(nil), r.workers...)
		r.mu.Unlock()
		for _, w := range ws {
			if held := r.heldBy(w); len(held) > 0 || time.Now().After(deadline) {
				if take {
					r.takeWorker(w)
				}
				return w, held
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// takeWorker removes w from the pool of workers the faults pick from.
func (r *run) takeWorker(w *proc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, x := range r.workers {
		if x == w {
			r.workers = append(r.workers[:i], r.workers[i+1:]...)
			return
		}
	}
}

// submit posts like a careful client: it retries connection errors, 5xx and a 409 for an
// Idempotency-Key still in flight with backoff, keeping its Idempotency-Key. Any other 409 (an
// order id already used with other content) is an answer.
func (r *run) submit(path, body, key string) (string, int) {
	client := &http.Client{Timeout: 5 * time.Second}
	backoff := 100 * time.Millisecond
	for try := 0; try < 40; try++ {
		req, _ := http.NewRequest(http.MethodPost, "http://"+r.api.addr+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", strconv.Quote(key))
		}
		resp, err := client.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var a struct {
				JobID string `json:"job_id"`
				Field string `json:"field"`
			}
			_ = json.Unmarshal(b, &a)
			if resp.StatusCode < 500 && (resp.StatusCode != http.StatusConflict || a.Field != "Idempotency-Key") {
				if resp.StatusCode < 300 {
					r.accepted.Store(a.JobID, true)
				}
				return a.JobID, resp.StatusCode
			}
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
	}
	return "", 0
}

// jobRecords reads every job record in Redis: id -> fields.
func (r *run) jobRecords(fields ...string) map[string][]any {
	ctx := context.Background()
	out := map[string][]any{}
	var keys []string
	for _, k := range scanKeys(r.rdb, "jobguard:*:job:*") {
		if !strings.HasSuffix(k, ":timeline") {
			keys = append(keys, k)
		}
	}
	// Through jobstore's reader: a finished job's record derives some fields (its id among them).
	pipe := r.rdb.Pipeline()
	reads := make([]func() map[string]string, len(keys))
	for i, k := range keys {
		reads[i] = jobstore.QueueFields(ctx, pipe, k, append([]string{"job_id"}, fields...)...)
	}
	_, _ = pipe.Exec(ctx)
	for _, read := range reads {
		f := read()
		id, ok := f["job_id"]
		if !ok {
			continue
		}
		v := make([]any, len(fields))
		for i, name := range fields {
			if s, ok := f[name]; ok {
				v[i] = s
			}
		}
		out[id] = v
	}
	return out
}

// scanKeys lists the keys matching pattern on every master of rdb (a cluster's or the one server).
func scanKeys(rdb redis.UniversalClient, pattern string) []string {
	ctx := context.Background()
	var mu sync.Mutex
	var keys []string
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			keys = append(keys, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		_ = cc.ForEachMaster(ctx, scan)
		return keys
	}
	iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	return keys
}

// heldBy lists the jobs a worker process is running: job id -> the delivery it runs.
func (r *run) heldBy(w *proc) map[string]string {
	suffix := "-" + strconv.Itoa(w.cmd.Process.Pid)
	held := map[string]string{}
	for id, f := range r.jobRecords("status", "worker_id", "delivery") {
		if s, _ := f[0].(string); s == "processing" {
			if wid, _ := f[1].(string); strings.HasSuffix(wid, suffix) {
				held[id], _ = f[2].(string)
			}
		}
	}
	return held
}

// explainSlowEnd logs the timeline of the job of a lost worker that took longest to end, when it
// took more than 20 s: the figure then names its cause (retries, bounces, the backlog).
func (r *run) explainSlowEnd(endedAt map[string]time.Duration) {
	slowest, took := "", time.Duration(0)
	for id, d := range endedAt {
		if d > took {
			slowest, took = id, d
		}
	}
	if took < 20*time.Second {
		return
	}
	ctx := context.Background()
	for _, k := range scanKeys(r.rdb, "jobguard:*:job:"+slowest) {
		var events []string
		evs, _ := engine.ReadTimeline(ctx, r.rdb, k)
		for _, ev := range evs {
			events = append(events, fmt.Sprintf("%s %s %s", time.UnixMilli(ev.At).Format("15:04:05.000"), ev.Event, ev.Detail))
		}
		r.t.Logf("a lost worker's job %s ended %s after the fault:\n  %s", slowest, took.Round(100*time.Millisecond), strings.Join(events, "\n  "))
	}
}

// recovery measures, after a worker was lost, how long until every job it held was delivered
// again (a newer delivery was enqueued, or the job ended), and how long until every one of them
// ended; the latter includes waiting behind the queue's backlog and the retries they then need.
func (r *run) recovery(held map[string]string, since time.Time) {
	if len(held) == 0 {
		return
	}
	go func() {
		resumed := false
		endedAt := map[string]time.Duration{}
		deadline := since.Add(2 * time.Minute)
		for time.Now().Before(deadline) {
			redelivered, ended := 0, 0
			recs := r.jobRecords("status", "delivery")
			for id, delivery := range held {
				s, _ := recs[id][0].(string)
				d, _ := recs[id][1].(string)
				switch {
				case isEnded(s):
					ended++
					if _, ok := endedAt[id]; !ok {
						endedAt[id] = time.Since(since)
					}
				case d != "" && d != delivery:
					redelivered++
				}
			}
			r.mu.Lock()
			if !resumed && redelivered+ended == len(held) {
				resumed = true
				r.resumed = append(r.resumed, time.Since(since))
			}
			if ended == len(held) {
				r.finished = append(r.finished, time.Since(since))
				r.mu.Unlock()
				r.explainSlowEnd(endedAt)
				return
			}
			r.mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
	}()
}

// isEnded reports whether a job status is an end: done, failed, revoked, cancelled or expired.
func isEnded(status string) bool {
	switch status {
	case "done", "failed", "revoked", "cancelled", "expired":
		return true
	}
	return false
}

func (r *run) kill() {
	w, held := r.busyWorker(true)
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	r.recovery(held, time.Now())
	r.cancelHeld(held) // cancels racing the rescue
	r.kills.Add(1)
	r.startWorker()
}

func (r *run) pause() {
	w, held := r.busyWorker(false)
	_ = w.cmd.Process.Signal(syscall.SIGSTOP)
	r.cancelHeld(held) // their handlers are paused: nothing they write after the 200 may land
	time.Sleep(2*leaseTTL + time.Second)
	_ = w.cmd.Process.Signal(syscall.SIGCONT)
	r.pauses.Add(1)
}

func (r *run) sigterm() {
	w, _ := r.busyWorker(true)
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	r.sigterms.Add(1)
	r.startWorker()
}

func (r *run) restartRedis() {
	r.redisMu.Lock()
	defer r.redisMu.Unlock()
	r.redis.Kill()
	time.Sleep(time.Second)
	if err := r.redis.Restart(); err != nil {
		r.t.Errorf("redis restart: %v", err)
	}
	r.restarts.Add(1)
}

// network delays one worker's Redis traffic by more than a lease TTL while rebuilds run, so writes
// it sent with a valid lease arrive after the job was rescued and rewritten elsewhere (only the
// fence stops them), then cuts it off for a while.
func (r *run) network() {
	r.proxy.SetLatency(6 * time.Second)
	for i := 0; i < 8; i++ {
		r.rebuildBurst()
		time.Sleep(time.Second)
	}
	r.proxy.SetLatency(0)
	r.proxy.Partition(3 * time.Second)
	r.netFaults.Add(2)
}

var hotResources = []string{"home", "catalog", "search"}

func (r *run) rebuildBurst() {
	for _, res := range hotResources {
		go func() {
			// A quarter of the rebuilds may be cancelled while they run.
			if id, code := r.submit("/jobs/rebuild-cache", fmt.Sprintf(`{"tenant_id":"t1","resource_id":%q}`, res), ""); code < 300 && rand.IntN(4) == 0 {
				r.cancellable(id, cancelTarget{rebuild: res})
			}
		}()
	}
}

// watchCache polls the hot cache entries and counts any fencing token that went backwards.
func (r *run) watchCache(stop <-chan struct{}, resources []string) {
	last := map[string]int64{}
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		select {
		case <-stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
		unwritten := r.cancels.unwrittenNow() // cancelled rebuilds answered before this poll
		for _, res := range resources {
			resp, err := client.Get("http://" + r.api.addr + "/cache/t1/" + res)
			if err != nil {
				continue
			}
			var e struct {
				FencingToken int64  `json:"fencing_token"`
				JobID        string `json:"job_id"`
			}
			derr := json.NewDecoder(resp.Body).Decode(&e)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || derr != nil {
				continue // not built yet, or Redis is down: nothing was read
			}
			if e.FencingToken < last[res] {
				r.tokenWentBack.Add(1)
			}
			r.cancels.sawCache(e.JobID, unwritten)
			last[res] = max(last[res], e.FencingToken)
		}
	}
}

// TestChaos drives orders and cache rebuilds through an API and several workers while killing,
// pausing and terminating workers, restarting Redis and degrading one worker's network; then checks
// that nothing was lost or applied twice. CHAOS=short (about 2 minutes) or CHAOS=long (15 minutes
// of faults).
func TestChaos(t *testing.T) {
	variant := os.Getenv("CHAOS")
	var duration time.Duration
	switch variant {
	case "short":
		duration = 60 * time.Second
	case "long":
		duration = 15 * time.Minute
	default:
		t.Skip("set CHAOS=short or CHAOS=long (make chaos, make chaos-long)")
	}
	wall := time.Now()
	bin := buildJobguard(t)
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	px, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	var upCalls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n := upCalls.Add(1)
		delay := time.Duration(rand.IntN(300)) * time.Millisecond
		if rand.IntN(100) < 5 {
			delay = 2500 * time.Millisecond // slower than a lease TTL: only renewals keep it
		}
		time.Sleep(delay)
		switch x := rand.IntN(100); {
		case x < 10:
			w.WriteHeader(http.StatusServiceUnavailable)
		case x < 15:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			fmt.Fprintf(w, "v%d", n)
		}
	}))
	defer up.Close()
	r := newRun(&run{t: t, bin: bin, redis: srv, rdb: srv.Client(t, 0), proxy: px, up: up, env: []string{scheduleEnv, limitEnv}})
	r.api = r.start("api", srv.Addr)
	for i := 0; i < 3; i++ {
		r.startWorker()
	}
	// The schedule's window starts at the first leader's cursor.
	var tickStart time.Time
	for until := time.Now().Add(30 * time.Second); tickStart.IsZero(); time.Sleep(50 * time.Millisecond) {
		if tickStart = r.cursor(); tickStart.IsZero() && time.Now().After(until) {
			t.Fatal("no scheduler leader wrote the schedule's cursor within 30 s")
		}
	}
	scheduleFaultsDone := make(chan struct{})
	go r.scheduleFaults(duration, scheduleFaultsDone)

	// Faults, spread over the run; the long variant repeats the cycle.
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		cycle := []func(){r.kill, r.pause, r.network, r.restartRedis, r.sigterm, r.kill}
		// The faults themselves take up to about 30 s per cycle (a pause holds for 5 s, the network
		// fault for 11 s, finding a busy worker up to 3 s each), so the first cycle fits a short run.
		step := min((duration-30*time.Second)/time.Duration(len(cycle)+1), 90*time.Second/time.Duration(len(cycle)))
		end := time.Now().Add(duration)
		for time.Now().Before(end) {
			for _, fault := range cycle {
				time.Sleep(step)
				if time.Now().After(end) {
					return
				}
				fault()
			}
		}
	}()
	stopWatch := make(chan struct{})
	hot := hotResources
	go r.watchCache(stopWatch, hot)
	slots := r.watchLimit(stopWatch, []string{"t1", "t2", "t3"})
	cancelsDone := make(chan struct{})
	go func() { defer close(cancelsDone); r.cancelRunning(stopWatch, int(duration/time.Second)) }()

	// Workload: orders (a third submitted more than once) and bursts of rebuilds.
	nOrders := int(duration / (100 * time.Millisecond))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	deadline := time.Now().Add(duration)
	for i := 0; i < nOrders && time.Now().Before(deadline); i++ {
		o := order{tenant: fmt.Sprint("t", i%3+1), sku: fmt.Sprint("sku-", rand.IntN(5)), qty: rand.IntN(5) + 1}
		id := fmt.Sprint("o-", i)
		body := fmt.Sprintf(`{"tenant_id":%q,"order_id":%q,"sku":%q,"quantity":%d}`, o.tenant, id, o.sku, o.qty)
		key := ""
		if i%2 == 0 {
			key = "k-" + id
		}
		dups := 0
		if i%3 == 0 {
			dups = 1 + i%2
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			jobID, code := r.submit("/jobs/reserve-stock", body, key)
			if code >= 200 && code < 300 {
				r.orders.Store(o.tenant+"/"+id, o)
				// Orders submitted once only may be cancelled: a tenth of all at once (mostly
				// queued), others while they run (cancelRunning).
				if i%3 != 0 && i%4 != 1 {
					r.cancellable(jobID, cancelTarget{order: o.tenant + "/" + id, tenant: o.tenant, sku: o.sku, orderID: id})
					if i%5 == 2 {
						time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
						r.cancel(jobID)
					}
				}
			}
			r.submissions.Add(1)
			for d := 0; d < dups; d++ {
				if d == 1 {
					time.Sleep(time.Duration(rand.IntN(3000)) * time.Millisecond) // later, after it may be done
				}
				k := key
				if d == 1 {
					k = "" // without the key: only the job's dedup and op key stand in the way
				}
				r.submit("/jobs/reserve-stock", body, k)
				r.submissions.Add(1)
				r.duplicates.Add(1)
			}
			if i%4 == 1 {
				// The same order id with another sku (or quantity): refused, never applied.
				c := o
				if i%8 == 1 {
					c.sku = fmt.Sprint("sku-", (rand.IntN(4)+1+skuOf(o.sku))%5)
				} else {
					c.qty++
				}
				k := ""
				if i%3 == 1 {
					k = "kc-" + id // a key of its own: the same key with another body would be a 422
				}
				_, code := r.submit("/jobs/reserve-stock", fmt.Sprintf(`{"tenant_id":%q,"order_id":%q,"sku":%q,"quantity":%d}`, c.tenant, id, c.sku, c.qty), k)
				r.submissions.Add(1)
				r.conflicts.Add(1)
				switch _, first := r.orders.Load(o.tenant + "/" + id); {
				case code == http.StatusConflict:
					r.conflictsRefused.Add(1)
				case code >= 200 && code < 300 && first:
					r.conflictsAccepted.Add(1)
				case code >= 200 && code < 300:
					r.orders.Store(o.tenant+"/"+id, c) // the first never got in: this one is the order
				}
			}
		}()
		if i%20 == 0 {
			r.rebuildBurst()
		}
		time.Sleep(time.Until(wall.Add(time.Duration(i+1) * duration / time.Duration(nOrders))))
	}
	wg.Wait()
	<-faultsDone
	<-scheduleFaultsDone
	pausedAt := r.pauseSchedule()
	for name, n := range map[string]int64{"kill": r.kills.Load(), "pause": r.pauses.Load(), "network fault": r.netFaults.Load(),
		"Redis restart": r.restarts.Load(), "SIGTERM": r.sigterms.Load(), "scheduler leader kill": r.leaderKills.Load(),
		"scheduler leader pause": r.leaderPauses.Load(), "scheduler leader cut-off": r.leaderCuts.Load(), "Redis stall": r.stalls.Load()} {
		if n == 0 {
			t.Errorf("the run ended before any %s: the faults do not fit its duration", name)
		}
	}

	// Quiescence: every job ends.
	quiet := time.Now().Add(3 * time.Minute)
	for {
		open := 0
		for _, f := range r.jobRecords("status") {
			if s, _ := f[0].(string); !isEnded(s) {
				open++
			}
		}
		if open == 0 {
			break
		}
		if time.Now().After(quiet) {
			t.Errorf("invariant: %d jobs still not ended 3 minutes after the workload", open)
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	close(stopWatch)
	<-cancelsDone
	sf := r.checkSchedule(tickStart, pausedAt)
	r.check(append(hot, tickResource), sf, time.Since(wall))
	r.limitInvariants(slots)
}

// check verifies the invariants and prints the figures.
func (r *run) check(hot []string, sf scheduleFigures, wall time.Duration) {
	t, ctx := r.t, context.Background()
	locksKey := func(resource, name string) string {
		return "jobguard:{" + engine.ResourceTag(resource) + "}:" + name
	}
	// Every accepted order applied exactly once.
	want := map[string]int64{}
	orders := map[string]int{}
	r.orders.Range(func(k, v any) bool {
		o := v.(order)
		want[o.tenant+":"+o.sku] += int64(o.qty)
		orders[o.tenant+":"+o.sku]++
		return true
	})
	doubles, lostOrders := 0, 0
	// Across every sku's ledger: order ids are unique in a run, so an order id twice is an order
	// applied twice, on one sku or on two.
	applied := map[string]int{}
	iter := r.rdb.Scan(ctx, 0, "jobguard:*:ledger", 1000).Iterator()
	for iter.Next(ctx) {
		for _, e := range r.rdb.LRange(ctx, iter.Val(), 0, -1).Val() {
			var entry struct{ Order string }
			_ = json.Unmarshal([]byte(e), &entry)
			if applied[entry.Order]++; applied[entry.Order] > 1 {
				doubles++
			}
		}
	}
	for res, total := range want {
		got, _ := r.rdb.HGet(ctx, locksKey(res, "stock"), "reserved").Int64()
		ledger := r.rdb.LRange(ctx, locksKey(res, "ledger"), 0, -1).Val()
		seen := map[string]bool{}
		for _, e := range ledger {
			var entry struct{ Order string }
			_ = json.Unmarshal([]byte(e), &entry)
			seen[entry.Order] = true
		}
		if got != total || len(ledger) != orders[res] {
			t.Errorf("invariant: %s reserved %d for %d ledger entries, want %d for %d orders", res, got, len(ledger), total, orders[res])
			lostOrders += orders[res] - len(seen)
		}
	}
	// Every accepted job exists and ended; none stuck.
	recs := r.jobRecords("status", "type", "resource", "fencing_token")
	lost, failed, jobs, cancelledN, expired := 0, 0, 0, 0, 0
	r.accepted.Range(func(k, _ any) bool {
		jobs++
		f, ok := recs[k.(string)]
		if !ok {
			lost++
			return true
		}
		switch s, _ := f[0].(string); s {
		case "done":
		case "failed":
			failed++
		case "cancelled":
			cancelledN++
			r.cancels.mu.Lock()
			if t := r.cancels.targets[k.(string)]; t == nil || !t.cancelled {
				t := r.t
				t.Errorf("invariant: job %s is cancelled, and the run did not cancel it", k)
			}
			r.cancels.mu.Unlock()
		case "expired":
			expired++
		default:
			lost++
		}
		return true
	})
	cf := r.checkCancels(recs)
	if lost > 0 {
		t.Errorf("invariant: %d accepted jobs lost or stuck", lost)
	}
	// Each cache entry holds the highest-token completed rebuild, or that of a rebuild cancelled
	// after it wrote (a higher token than every completed one's), and its token never went back.
	for _, res := range hot {
		var best int64
		cancelledTokens := map[int64]bool{}
		for _, f := range recs {
			if f[1] == "rebuild-cache" && f[2] == "t1:"+res {
				ts, _ := f[3].(string) // none for a job cancelled before it ran
				tok, _ := strconv.ParseInt(ts, 10, 64)
				switch f[0] {
				case "done":
					best = max(best, tok)
				case "cancelled":
					cancelledTokens[tok] = true
				}
			}
		}
		tok, _ := r.rdb.HGet(ctx, locksKey("t1:"+res, "cache"), "token").Int64()
		if best > 0 && tok != best && !(tok > best && cancelledTokens[tok]) {
			t.Errorf("invariant: cache t1/%s holds token %d, the highest completed rebuild has %d", res, tok, best)
		}
	}
	if n := r.tokenWentBack.Load(); n > 0 {
		t.Errorf("invariant: a cache entry's fencing token went backwards %d times", n)
	}
	// Nothing without a TTL but live data.
	persistent := 0
	iter = r.rdb.Scan(ctx, 0, "jobguard:*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		live := strings.HasSuffix(k, ":fence") || strings.HasSuffix(k, ":stock") || strings.HasSuffix(k, ":ledger") ||
			strings.HasSuffix(k, ":cache") || strings.Contains(k, ":applied:") || strings.HasPrefix(k, "jobguard:{order:") ||
			k == scheduleKey("schedule") || k == scheduleKey("schedule:jobs") // a schedule's state and its latest jobs
		if !live && r.rdb.PTTL(ctx, k).Val() < 0 {
			persistent++
			t.Errorf("invariant: %s has no TTL", k)
		}
	}
	// Figures: stale writes and rescues from the timelines.
	stale, rescued := 0, 0
	iter = r.rdb.Scan(ctx, 0, "jobguard:*:timeline", 1000).Iterator()
	for iter.Next(ctx) {
		for _, e := range r.rdb.LRange(ctx, iter.Val(), 0, -1).Val() {
			stale += strings.Count(e, `"stale_write_rejected"`)
			rescued += strings.Count(e, `"rescued"`)
		}
	}
	r.mu.Lock()
	resumedP50, resumedMax, nResumed := percentiles(r.resumed)
	finishedP50, finishedMax, nFinished := percentiles(r.finished)
	r.mu.Unlock()
	fmt.Printf(`
chaos figures (%s)
| jobs accepted | %d |
| orders accepted | %d |
| duplicate submissions | %d of %d |
| conflicting resubmissions (same order id, other sku or quantity): refused 409 / accepted | %d of %d / %d |
| jobs failed (dead letter) / cancelled / expired | %d / %d / %d |
| cancels answered 200 (by the status the job had) | %d (%s) |
| cancels answered 409 (the job had ended) / other answers | %d / %d |
| cancelled orders: applied before the 200 / not applied / applied after the 200 | %d / %d / %d |
| jobs cancelled with a 200 that ended otherwise | %d |
| cancelled rebuilds / their cache write seen landing after the 200 | %d / %d |
| worker kills (kill -9) | %d |
| worker pauses (SIGSTOP past the lease) | %d |
| worker SIGTERMs | %d |
| Redis restarts | %d |
| network faults (latency, partition) | %d |
| scheduler leader kills (-9) / pauses (SIGSTOP past the lease) / cut-offs (past the lease) | %d / %d / %d |
| Redis stalls (SIGSTOP past the lease) | %d |
| schedule @every 1s: ticks expected / jobs created / duplicates / missing | %s |
| schedule: from its last tick's job to the pause | %s |
| stale writes rejected | %d |
| rescues | %d |
| lost jobs | %d |
| double applications | %d |
| keys without TTL (not live data) | %d |
| after a kill: its jobs delivered again, p50 / max | %s / %s (%d measured) |
| after a kill: its jobs ended, p50 / max | %s / %s (%d measured) |
| wall time | %s |
`, os.Getenv("CHAOS"), jobs, countOrders(&r.orders), r.duplicates.Load(), r.submissions.Load(),
		r.conflictsRefused.Load(), r.conflicts.Load(), r.conflictsAccepted.Load(), failed, cancelledN, expired,
		cf.answered200, cf.was, cf.ended409, cf.other, cf.appliedBefore, cf.notApplied, cf.appliedAfter, cf.notCancelled,
		cf.rebuildsCancelled, cf.lateCacheWrites,
		r.kills.Load(), r.pauses.Load(), r.sigterms.Load(), r.restarts.Load(), r.netFaults.Load(),
		r.leaderKills.Load(), r.leaderPauses.Load(), r.leaderCuts.Load(), r.stalls.Load(), sf, sf.tail.Round(100*time.Millisecond),
		stale, rescued, lost+lostOrders, doubles, persistent, resumedP50, resumedMax, nResumed, finishedP50, finishedMax, nFinished,
		wall.Round(time.Second))
	if doubles > 0 {
		t.Errorf("invariant: %d orders applied twice", doubles)
	}
	if n := r.conflictsAccepted.Load(); n > 0 {
		t.Errorf("invariant: %d conflicting resubmissions of an accepted order were accepted", n)
	}
	r.scheduleInvariants(sf)
	r.cancelInvariants(cf)
}

// percentiles gives the p50 and max of ds, rounded, and how many there are.
func percentiles(ds []time.Duration) (p50, worst string, n int) {
	if len(ds) == 0 {
		return "-", "-", 0
	}
	ds = append([]time.Duration(nil), ds...)
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	round := func(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }
	return round(ds[len(ds)/2]), round(ds[len(ds)-1]), len(ds)
}

// skuOf is the number of a "sku-<n>".
func skuOf(sku string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(sku, "sku-"))
	return n
}

func countOrders(m *sync.Map) int {
	n := 0
	m.Range(func(any, any) bool { n++; return true })
	return n
}
