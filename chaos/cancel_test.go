package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jobguard/jobguard/internal/engine"
)

// cancelTarget is a job the run may cancel: an order that is submitted once only (no duplicate,
// no conflicting resubmission, so that no later job of the same order can legitimately apply it
// after its cancel), or a rebuild.
type cancelTarget struct {
	order     string // "tenant/order id"; "" for a rebuild
	tenant    string
	sku       string
	orderID   string
	rebuild   string // the rebuild's resource id ("" for an order)
	cancelled bool
}

// cancelled is a cancel the API answered 200 (or 409 "it is cancelled", when the 200 of an
// earlier try was lost), and what the order's ledger held just after the answer.
type cancelled struct {
	jobID, was  string
	target      cancelTarget
	appliedThen bool // the order was in its ledger when the answer had come
}

// cancels is the cancel part of a run.
type cancels struct {
	mu      sync.Mutex
	targets map[string]*cancelTarget // job id ->
	done    []cancelled
	was     map[string]int // 200 answers by the status the job had
	ended   int            // 409: the job had ended
	other   map[int]int    // any other answer
	// unwritten: cancelled rebuilds whose job id the cache entry did not hold just after the
	// answer; late: those of them seen in the cache entry afterwards (a write after the 200)
	unwritten, late map[string]bool
}

// newRun is a run with its cancel part ready; every test builds its run through it, so that no
// mode can forget the maps (the failover mode once did and panicked in CI).
func newRun(r *run) *run {
	r.cancels.init()
	return r
}

func (c *cancels) init() {
	c.targets = map[string]*cancelTarget{}
	c.was = map[string]int{}
	c.other = map[int]int{}
	c.unwritten = map[string]bool{}
	c.late = map[string]bool{}
}

// cacheJob is the job id the cache entry of t1/res holds.
func (r *run) cacheJob(res string) string {
	return r.rdb.HGet(context.Background(), "jobguard:{"+engine.ResourceTag("t1:"+res)+"}:cache", "job_id").Val()
}

// unwrittenNow copies the cancelled rebuilds not in their cache entry when their cancel was answered.
func (c *cancels) unwrittenNow() map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.unwritten)
}

// sawCache records that the cache entry held job id after its cancel's answer, if the entry did
// not hold it then.
func (c *cancels) sawCache(jobID string, unwritten map[string]bool) {
	if unwritten[jobID] {
		c.mu.Lock()
		c.late[jobID] = true
		c.mu.Unlock()
	}
}

// cancellable registers a job the run may cancel.
func (r *run) cancellable(jobID string, t cancelTarget) {
	if jobID == "" {
		return
	}
	r.cancels.mu.Lock()
	if _, ok := r.cancels.targets[jobID]; !ok { // a deduplicated rebuild comes back with its job's id
		r.cancels.targets[jobID] = &t
	}
	r.cancels.mu.Unlock()
}

// ledgerHas reports whether order id is in the ledger of tenant's sku.
func (r *run) ledgerHas(tenant, sku, orderID string) bool {
	key := "jobguard:{" + engine.ResourceTag(tenant+":"+sku) + "}:ledger"
	for _, e := range r.rdb.LRange(context.Background(), key, 0, -1).Val() {
		var entry struct{ Order string }
		if json.Unmarshal([]byte(e), &entry) == nil && entry.Order == orderID {
			return true
		}
	}
	return false
}

// cancel cancels a job like a careful client (connection errors and 5xx are retried) and
// records the answer.
func (r *run) cancel(jobID string) {
	r.cancels.mu.Lock()
	t, ok := r.cancels.targets[jobID]
	if !ok || t.cancelled {
		r.cancels.mu.Unlock()
		return
	}
	t.cancelled = true
	target := *t
	r.cancels.mu.Unlock()
	client := &http.Client{Timeout: 5 * time.Second}
	backoff := 100 * time.Millisecond
	for try := 0; try < 40; try++ {
		resp, err := client.Post("http://"+r.api.addr+"/jobs/"+jobID+"/cancel", "application/json", strings.NewReader(`{"reason":"chaos"}`))
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var a struct{ Was, Detail string }
			_ = json.Unmarshal(b, &a)
			if resp.StatusCode == http.StatusConflict && strings.Contains(a.Detail, "it is cancelled") {
				resp.StatusCode, a.Was = http.StatusOK, "cancelled (its 200 lost)"
			}
			if resp.StatusCode < 500 {
				c := cancelled{jobID: jobID, was: a.Was, target: target}
				if resp.StatusCode == http.StatusOK && target.order != "" {
					c.appliedThen = r.ledgerHas(target.tenant, target.sku, target.orderID)
					if !c.appliedThen {
						r.orders.Delete(target.order) // not applied: it must stay so
					}
				}
				unwritten := resp.StatusCode == http.StatusOK && target.rebuild != "" && r.cacheJob(target.rebuild) != jobID
				r.cancels.mu.Lock()
				if unwritten {
					r.cancels.unwritten[jobID] = true
				}
				switch resp.StatusCode {
				case http.StatusOK:
					kind := "order"
					if target.order == "" {
						kind = "rebuild"
					}
					r.cancels.was[kind+" "+a.Was]++
					r.cancels.done = append(r.cancels.done, c)
				case http.StatusConflict:
					r.cancels.ended++
				default:
					r.cancels.other[resp.StatusCode]++
				}
				r.cancels.mu.Unlock()
				return
			}
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
	}
	r.cancels.mu.Lock()
	r.cancels.other[0]++
	r.cancels.mu.Unlock()
}

// cancelRunning cancels, every 150 ms, a few of the cancellable jobs that are running (or
// retrying) now: those of a worker paused, slowed down or killed are held the longest, and a
// paused handler that writes after the cancel's answer must be refused by the raised fence.
func (r *run) cancelRunning(stop <-chan struct{}, limit int) {
	n := 0
	for n < limit {
		select {
		case <-stop:
			return
		case <-time.After(150 * time.Millisecond):
		}
		var orders, rebuilds []string
		r.cancels.mu.Lock()
		for id, f := range r.jobRecords("status") {
			s, _ := f[0].(string)
			if t, ok := r.cancels.targets[id]; ok && !t.cancelled && (s == "processing" || s == "retrying") {
				if t.order != "" {
					orders = append(orders, id)
				} else {
					rebuilds = append(rebuilds, id)
				}
			}
		}
		r.cancels.mu.Unlock()
		// Orders first (they run for milliseconds unless their worker is paused, slowed or
		// killed), then one rebuild.
		slices.Sort(orders)
		for _, id := range append(orders[:min(len(orders), 3)], rebuilds[:min(len(rebuilds), 1)]...) {
			r.cancel(id)
			n++
		}
	}
}

// cancelHeld cancels the cancellable jobs among those a worker held when it was paused or killed.
func (r *run) cancelHeld(held map[string]string) {
	for id := range held {
		r.cancel(id)
	}
}

// cancelFigures is what the cancels did, checked after quiescence.
type cancelFigures struct {
	answered200, ended409, other int
	was                          string
	appliedBefore, notApplied    int
	appliedAfter                 int // orders applied after their cancel's 200: the fence failed
	rebuildsCancelled            int // rebuilds among the 200s
	lateCacheWrites              int // cancelled rebuilds whose cache write landed after the 200
	notCancelled                 int // jobs whose cancel answered 200 that ended otherwise
	notCancelledIDs              []string
}

// checkCancels: a cancel's 200 means the job ends cancelled and its order, if it was not in the
// ledger when the answer came, is never applied.
func (r *run) checkCancels(recs map[string][]any) cancelFigures {
	r.cancels.mu.Lock()
	defer r.cancels.mu.Unlock()
	f := cancelFigures{answered200: len(r.cancels.done), ended409: r.cancels.ended}
	for _, n := range r.cancels.other {
		f.other += n
	}
	var was []string
	for k, n := range r.cancels.was {
		was = append(was, fmt.Sprintf("%s %d", k, n))
	}
	slices.Sort(was)
	f.was = strings.Join(was, ", ")
	for _, c := range r.cancels.done {
		if s, _ := recs[c.jobID][0].(string); s != "cancelled" {
			f.notCancelled++
			f.notCancelledIDs = append(f.notCancelledIDs, c.jobID+" ("+s+")")
		}
		if c.target.rebuild != "" {
			f.rebuildsCancelled++
			if r.cancels.unwritten[c.jobID] && r.cacheJob(c.target.rebuild) == c.jobID {
				r.cancels.late[c.jobID] = true
			}
		}
		if c.target.order == "" {
			continue
		}
		switch {
		case c.appliedThen:
			f.appliedBefore++
		case r.ledgerHas(c.target.tenant, c.target.sku, c.target.orderID):
			f.appliedAfter++
		default:
			f.notApplied++
		}
	}
	f.lateCacheWrites = len(r.cancels.late)
	return f
}

func (r *run) cancelInvariants(f cancelFigures) {
	t := r.t
	if f.appliedAfter > 0 {
		t.Errorf("invariant: %d cancelled orders applied after their cancel was answered 200", f.appliedAfter)
	}
	if f.notCancelled > 0 {
		t.Errorf("invariant: %d jobs whose cancel was answered 200 did not end cancelled: %v", f.notCancelled, f.notCancelledIDs)
	}
	if f.other > 0 {
		t.Errorf("invariant: %d cancels answered neither 200 nor 409", f.other)
	}
	if f.answered200 == 0 {
		t.Errorf("the run cancelled no job")
	}
	if f.lateCacheWrites > 0 {
		t.Errorf("invariant: %d cancelled rebuilds wrote the cache after their cancel's 200", f.lateCacheWrites)
	}
}
