package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/engine"
)

// wfFigures is what checkWorkflows found: the invariants' counts and the figures around them.
type wfFigures struct {
	nodes, batchJobs int
	// invariants (each must be 0)
	doubleEffects, lostEffects, earlyStarts, doubleStarts, releasedWrong, wrongStatus, callbackJobsWrong, stuck int
	// figures
	restarts, refused, lost, rescues           int
	onSuccessRan, onSuccessSkipped, onComplete int
	endAt                                      []int64 // each ended workflow's or batch's end (unix ms)
	problems                                   []string
}

func (f *wfFigures) problem(format string, args ...any) {
	if len(f.problems) < 40 {
		f.problems = append(f.problems, fmt.Sprintf(format, args...))
	}
}

// wfNodeRun is one node as its timeline tells it.
type wfNodeRun struct {
	id, status                              string
	parents                                 []string
	starts                                  []jobEvent // lease_acquired
	endAt                                   int64      // its first end event (done, failed, skipped, cancelled, expired); 0: none
	dones, released, refused, lost, rescued int
}

func readNodeRun(addr, id, jobID, status string, parents []string) wfNodeRun {
	n := wfNodeRun{id: id, status: status, parents: parents}
	var j jobView
	getJSON(addr, "/jobs/"+jobID, &j)
	for _, e := range j.Timeline {
		switch e.Event {
		case "lease_acquired":
			n.starts = append(n.starts, e)
		case "released":
			n.released++
		case "stale_write_rejected":
			n.refused++
		case "lease_lost": // a renewal that failed writes lease_renew_failed too: one run, counted once
			n.lost++
		case "rescued":
			n.rescued++
		}
		switch e.Event {
		case "done", "already_applied", "failed", "skipped", "cancelled", "expired":
			if n.endAt == 0 {
				n.endAt = e.At
			}
			if e.Event == "done" || e.Event == "already_applied" {
				n.dones++
			}
		}
	}
	return n
}

// effectOf names the sku and order of a node's reserve-stock effect; "" for the failing batch job
// (a rebuild-cache job, no effect).
func effectOf(s *wfSubject, node string) (sku, order string) {
	switch {
	case s.kind == "workflow":
		return s.label, s.label + "-" + node
	case node == engine.BatchOnSuccess:
		return s.label + "-ons", s.label + "-ons-ons"
	case node == engine.BatchOnComplete:
		return s.label + "-onc", s.label + "-onc-onc"
	case s.failing && node == fmt.Sprint("job-", batchJobs-1):
		return "", ""
	}
	return s.label, s.label + "-j" + strings.TrimPrefix(node, "job-")
}

// expectedStatus is the status a node must end with: done, but in a failing batch its failing job
// fails and on_success is skipped.
func expectedStatus(s *wfSubject, node string) string {
	if !s.failing {
		return "done"
	}
	switch node {
	case fmt.Sprint("job-", batchJobs-1):
		return "failed"
	case engine.BatchOnSuccess:
		return "skipped"
	}
	return "done"
}

// ledgerCounts counts the ledger entries of sku by order: how many times each order's effect landed.
func (r *run) ledgerCounts(sku string) map[string]int {
	out := map[string]int{}
	key := "jobguard:{" + engine.ResourceTag("t1:"+sku) + "}:ledger"
	for _, e := range r.rdb.LRange(context.Background(), key, 0, -1).Val() {
		var entry struct{ Order string }
		_ = json.Unmarshal([]byte(e), &entry)
		out[entry.Order]++
	}
	return out
}

// checkWorkflows reads every ended workflow and batch, its nodes' timelines and the ledgers, and
// counts what the invariants forbid.
func (r *run) checkWorkflows(subjects []*wfSubject) *wfFigures {
	f := &wfFigures{}
	jobsByResource := map[string]int{}
	for _, rec := range r.jobRecords("resource") {
		if res, _ := rec[0].(string); res != "" {
			jobsByResource[res]++
		}
	}
	for _, s := range subjects {
		if s.status == "" {
			continue // stuck: counted by the caller
		}
		var v wfView
		getJSON(r.api.addr, "/workflows/"+s.id, &v)
		ledgers := map[string]map[string]int{}
		runs := map[string]wfNodeRun{}
		var end int64
		for _, n := range v.Nodes {
			run := readNodeRun(r.api.addr, n.ID, n.JobID, n.Status, n.Parents)
			runs[n.ID] = run
			end = max(end, run.endAt)
			if s.kind == "workflow" {
				f.nodes++
			} else if n.ID != engine.BatchOnSuccess && n.ID != engine.BatchOnComplete {
				f.batchJobs++
			}
			if want := expectedStatus(s, n.ID); n.Status != want {
				f.wrongStatus++
				f.problem("%s %s node %s ended %s, want %s", s.kind, s.label, n.ID, n.Status, want)
			}
			sku, order := effectOf(s, n.ID)
			if sku == "" {
				continue
			}
			if ledgers[sku] == nil {
				ledgers[sku] = r.ledgerCounts(sku)
			}
			applied := ledgers[sku][order]
			switch {
			case applied > 1:
				f.doubleEffects++
				f.problem("%s %s node %s: effect applied %d times", s.kind, s.label, n.ID, applied)
			case applied == 0 && n.Status == "done":
				f.lostEffects++
				f.problem("%s %s node %s is done and its effect never landed", s.kind, s.label, n.ID)
			case applied == 1 && n.Status != "done":
				f.lostEffects++ // an effect without its node done is as wrong as the reverse
				f.problem("%s %s node %s ended %s and its effect landed", s.kind, s.label, n.ID, n.Status)
			}
			if applied > 1 || run.dones > 1 || sharedToken(run.starts) {
				f.doubleStarts++
				f.problem("%s %s node %s started twice: %d effects, %d done events, starts %v", s.kind, s.label, n.ID, applied, run.dones, run.starts)
			}
			if s.kind == "batch" && (n.ID == engine.BatchOnSuccess || n.ID == engine.BatchOnComplete) {
				if jobs := jobsByResource["t1:"+sku]; jobs != 1 {
					f.callbackJobsWrong++
					f.problem("batch %s: %d jobs of its %s", s.label, jobs, n.ID)
				}
				switch {
				case n.ID == engine.BatchOnComplete && applied == 1:
					f.onComplete++
				case n.ID == engine.BatchOnSuccess && applied == 1:
					f.onSuccessRan++
				case n.ID == engine.BatchOnSuccess && n.Status == "skipped":
					f.onSuccessSkipped++
				}
			}
		}
		s.endAt = end
		f.endAt = append(f.endAt, end)
		for _, n := range runs {
			f.restarts += max(len(n.starts)-1, 0)
			f.refused += n.refused
			f.lost += n.lost
			f.rescues += n.rescued
			if len(n.parents) == 0 {
				continue
			}
			if want := map[bool]int{true: 0, false: 1}[n.status == "skipped"]; n.released != want {
				f.releasedWrong++
				f.problem("%s %s node %s released %d times", s.kind, s.label, n.id, n.released)
			}
			var parentsEnded int64
			for _, p := range n.parents {
				parentsEnded = max(parentsEnded, runs[p].endAt)
				if runs[p].endAt == 0 {
					parentsEnded = 1 << 62 // a parent that never ended: any start is early
				}
			}
			for _, st := range n.starts {
				if st.At < parentsEnded {
					f.earlyStarts++
					f.problem("%s %s node %s started at %d, before its parents ended (%d)", s.kind, s.label, n.id, st.At, parentsEnded)
					break
				}
			}
		}
	}
	return f
}

// sharedToken reports whether two runs started under one fencing token.
func sharedToken(starts []jobEvent) bool {
	seen := map[int64]bool{}
	for _, s := range starts {
		if seen[s.Token] {
			return true
		}
		seen[s.Token] = true
	}
	return false
}

// print writes the figures as a Markdown table.
func (f *wfFigures) print(subjects []*wfSubject, faults *wfFaults, lastFault time.Time, wall time.Duration) {
	byShape := map[string]int{}
	batches, failing := 0, 0
	for _, s := range subjects {
		if s.kind == "batch" {
			batches++
			if s.failing {
				failing++
			}
			continue
		}
		byShape[s.shape]++
	}
	var shapes []string
	for _, sh := range wfShapes {
		shapes = append(shapes, fmt.Sprintf("%s %d", sh.name, byShape[sh.name]))
	}
	var after []time.Duration
	for _, end := range f.endAt {
		if d := time.UnixMilli(end).Sub(lastFault); d > 0 {
			after = append(after, d)
		}
	}
	p50, worst, n := percentiles(after)
	fmt.Printf(`
workflow chaos figures (%s)
| workflows | %d (%s) |
| their nodes | %d |
| batches (with a failing job) / their jobs | %d (%d) / %d |
| worker kills (-9) | %d |
| worker pauses (SIGSTOP past the lease) / jobs running in them | %d / %d |
| Redis restarts (AOF, appendfsync always) | %d |
| rescues (timeline) / runs after a node's first (restarts) | %d / %d |
| late runs: stopped by their lapsed lease / finishes refused by the fence (timelines; worker logs) / effects refused by the fence (worker logs) | %d / %d (%d / %d) / %d |
| node effects applied twice / missing | %d / %d |
| nodes started before all their parents ended | %d |
| nodes started twice | %d |
| held nodes released other than once | %d |
| nodes ending otherwise than expected | %d |
| workflows or batches stuck (2 min after the last fault) | %d |
| callbacks: on_success ran / skipped; on_complete ran; callback kinds without exactly one job | %d / %d; %d; %d |
| time to finish after the last fault, p50 / max | %s / %s (%d ended after it) |
| wall time | %s |
`, os.Getenv("CHAOS"), len(subjects)-batches, strings.Join(shapes, ", "), f.nodes, batches, failing, f.batchJobs,
		faults.kills.Load(), faults.pauses.Load(), faults.caught.Load(), faults.restarts.Load(), f.rescues, f.restarts,
		f.lost, f.refused, faults.logged[0].Load(), faults.logged[1].Load(), faults.staleTokens.Load(),
		f.doubleEffects, f.lostEffects, f.earlyStarts, f.doubleStarts, f.releasedWrong, f.wrongStatus, f.stuck,
		f.onSuccessRan, f.onSuccessSkipped, f.onComplete, f.callbackJobsWrong, p50, worst, n, wall.Round(time.Second))
}

// assert fails the test for every broken invariant, naming the first problems found.
func (f *wfFigures) assert(t *testing.T) {
	for _, p := range f.problems {
		t.Log(p)
	}
	for name, n := range map[string]int{
		"node effects applied twice": f.doubleEffects, "node effects missing or landed without their node done": f.lostEffects,
		"nodes started before their parents ended": f.earlyStarts, "nodes started twice": f.doubleStarts,
		"held nodes released other than once": f.releasedWrong, "nodes ending otherwise than expected": f.wrongStatus,
		"callback kinds without exactly one job": f.callbackJobsWrong, "workflows or batches stuck": f.stuck,
	} {
		if n > 0 {
			t.Errorf("invariant: %d %s", n, name)
		}
	}
}

// explainSlowest logs the timelines of the workflow or batch that ended last, when that was more
// than 20 s after the last fault: the figure then names its cause.
func (r *run) explainSlowest(subjects []*wfSubject, lastFault time.Time) {
	var slowest *wfSubject
	for _, s := range subjects {
		if s.endAt > 0 && (slowest == nil || s.endAt > slowest.endAt) {
			slowest = s
		}
	}
	if slowest == nil || time.UnixMilli(slowest.endAt).Sub(lastFault) < 20*time.Second {
		return
	}
	var v wfView
	getJSON(r.api.addr, "/workflows/"+slowest.id, &v)
	var lines []string
	for _, n := range v.Nodes {
		var j struct {
			Timeline []struct {
				At                      int64
				Event, Detail, Delivery string
			}
		}
		getJSON(r.api.addr, "/jobs/"+n.JobID, &j)
		for _, e := range j.Timeline {
			lines = append(lines, fmt.Sprintf("%s %+.1fs %s %s %s", n.ID, time.UnixMilli(e.At).Sub(lastFault).Seconds(), e.Event, e.Delivery, e.Detail))
		}
	}
	r.t.Logf("%s %s (%s) ended %s after the last fault; its nodes' events (time from the last fault):\n  %s", slowest.kind, slowest.label,
		slowest.shape, time.UnixMilli(slowest.endAt).Sub(lastFault).Round(10*time.Millisecond), strings.Join(lines, "\n  "))
}
