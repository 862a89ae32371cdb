package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/redistest"
)

// Workflows and batches under faults (make chaos-workflows, CHAOS=workflows): jobguard's own
// binary, an API and three workers on a real Redis with AOF on (appendfsync always: a restart
// then loses no acknowledged write, so what the suite finds is the engine's, not the fsync
// window's). 200 workflows of four shapes (a diamond; a fan-out of 20 and its fan-in; a chain of
// 10; a diamond, a chain behind it and an all_ended clean-up) and 50 batches of six jobs with
// on_success and on_complete callbacks (one batch in five has a job that fails, so its on_success
// is skipped) are created over HTTP for about 70 s while, one fault every 0.5 to 1.5 s, a worker
// running a job is killed (-9), a worker is paused (SIGSTOP) mid-run for longer than LEASE_TTL and
// resumed, or Redis is killed and restarted on its AOF.
//
// Every node is a reserve-stock order of its own, so the sku's ledger counts the node's applied
// effects. Checked once every workflow and batch has ended (within 2 minutes of the last fault):
//   - every node's effect landed once: one ledger entry per done order, none for a skipped one;
//   - no node started before its parents ended: each run's lease_acquired is no earlier than
//     every parent's end (timeline timestamps, one machine's clock);
//   - no node started twice, where a double start is two runs of one node whose effects both
//     landed (two ledger entries), two runs that both ended it (two done or already_applied
//     events), or two lease_acquired under one fencing token (two valid leases at once). A node
//     run again after its worker was killed or paused is a restart, not a double start: the paused
//     run's late writes are stopped by its lapsed lease (lease_lost) or refused by the fence
//     (stale_write_rejected, or a stale-token error in the logs), and counted;
//   - every held node released exactly once;
//   - no workflow or batch left running;
//   - each batch has exactly one job per callback kind; on_complete's effect landed once,
//     on_success's once when every job was done and never (the callback skipped) otherwise.
func TestChaosWorkflows(t *testing.T) {
	if os.Getenv("CHAOS") != "workflows" {
		t.Skip("set CHAOS=workflows (make chaos-workflows)")
	}
	wall := time.Now()
	bin := buildJobguard(t)
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	// The rebuild source: a failing batch's rebuild-cache job gets a 404 (permanent), others a value.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.HasPrefix(req.URL.Query().Get("resource_id"), "fail-") {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		fmt.Fprint(w, "v")
	}))
	defer up.Close()
	var faults wfFaults
	r := newRun(&run{t: t, bin: bin, redis: srv, rdb: srv.Client(t, 0), up: up, env: []string{"RATE_LIMIT=0"}, onLine: faults.countLateEvents})
	r.api = r.start("api", srv.Addr)
	for range 3 {
		r.startWorker()
	}

	stop := make(chan struct{})
	faultsDone := make(chan struct{})
	go func() { defer close(faultsDone); r.injectWorkflowFaults(&faults, stop) }()

	const workflows, batches = 200, 50
	var subjects []*wfSubject
	for i := range workflows + batches {
		s := &wfSubject{}
		if i%5 == 4 {
			s.label, s.kind, s.failing = fmt.Sprint("b", i), "batch", (i/5)%5 == 0 // 10 of the 50 fail
			s.id = postCreate(t, r.api.addr, "/batches", batchBody(s.label, s.failing), "wfc-"+s.label)
		} else {
			shape := wfShapes[(i-i/5)%len(wfShapes)] // i-i/5: the workflows before this one
			s.label, s.kind, s.shape = fmt.Sprint("w", i), "workflow", shape.name
			s.id = postCreate(t, r.api.addr, "/workflows", workflowBody(s.label, shape.nodes()), "wfc-"+s.label)
		}
		subjects = append(subjects, s)
		time.Sleep(280 * time.Millisecond) // about 70 s of submissions, under the faults
	}
	close(stop)
	<-faultsDone
	lastFault := time.Unix(0, faults.last.Load())

	stuck := r.awaitEnded(subjects, lastFault.Add(2*time.Minute))
	f := r.checkWorkflows(subjects)
	f.stuck = len(stuck)
	for _, s := range stuck {
		r.explainStuck(s)
	}
	r.explainSlowest(subjects, lastFault)
	f.print(subjects, &faults, lastFault, time.Since(wall))
	f.assert(t)
}

// wfSubject is a workflow or a batch the run created.
type wfSubject struct {
	id, label, kind, shape string
	failing                bool // a batch with a job that fails
	status                 string
	endAt                  int64 // its last node's end (unix ms)
}

// awaitEnded polls the workflows and batches until each has ended or the deadline passes; it
// returns those still running.
func (r *run) awaitEnded(subjects []*wfSubject, deadline time.Time) []*wfSubject {
	for {
		var running []*wfSubject
		for _, s := range subjects {
			if s.status != "" {
				continue
			}
			var v wfView
			if getJSON(r.api.addr, "/workflows/"+s.id, &v) == http.StatusOK && v.Status != "running" {
				s.status = v.Status
				continue
			}
			running = append(running, s)
		}
		if len(running) == 0 || time.Now().After(deadline) {
			return running
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// explainStuck logs a workflow still running: its hash and its nodes' records.
func (r *run) explainStuck(s *wfSubject) {
	var v wfView
	getJSON(r.api.addr, "/workflows/"+s.id, &v)
	hash := r.rdb.HGetAll(r.t.Context(), "jobguard:{wf:"+s.id+"}:wf").Val()
	r.t.Logf("%s %s (%s) still running: hash %v", s.kind, s.id, s.label, hash)
	for _, n := range v.Nodes {
		rec := r.rdb.HGetAll(r.t.Context(), "jobguard:{"+n.JobID[:16]+"}:job:"+n.JobID).Val()
		r.t.Logf("  node %s %s: status %s delivery %s updated_at %s confirmed %s", n.ID, n.JobID, rec["status"], rec["delivery"], rec["updated_at"], rec["confirmed"])
	}
}

type wfView struct {
	Status string `json:"status"`
	Nodes  []struct {
		ID      string   `json:"id"`
		JobID   string   `json:"job_id"`
		Status  string   `json:"status"`
		Parents []string `json:"parents"`
	} `json:"nodes"`
}

type jobEvent struct {
	At    int64  `json:"at"`
	Event string `json:"event"`
	Token int64  `json:"token"`
}

type jobView struct {
	Status   string     `json:"status"`
	Timeline []jobEvent `json:"timeline"`
}

// postCreate creates a workflow or a batch as a careful client does: connection errors, 5xx and a
// 409 of its Idempotency-Key in flight are retried with the same key (the same one comes back).
func postCreate(t *testing.T, addr, path, body, key string) string {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	for try := 0; try < 60; try++ {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", `"`+key+`"`)
		resp, err := client.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var a struct {
				WorkflowID string `json:"workflow_id"`
				BatchID    string `json:"batch_id"`
			}
			if resp.StatusCode == http.StatusAccepted && json.Unmarshal(b, &a) == nil {
				return a.WorkflowID + a.BatchID
			}
			if resp.StatusCode < 500 && resp.StatusCode != http.StatusConflict {
				t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("POST %s: no answer", path)
	return ""
}

func getJSON(addr, path string, out any) int {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_ = json.NewDecoder(resp.Body).Decode(out)
	return resp.StatusCode
}
