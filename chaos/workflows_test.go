package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/redistest"
)

// Workflows under worker kills (make chaos-workflows, CHAOS=workflows): jobguard's own binary, an
// API and three workers on a real Redis; workflows of rebuild-cache nodes (a diamond, a chain
// behind it and a clean-up with all_ended) are created over HTTP while a worker running a job is
// killed (-9) every second and a new one started. A kill lands between a node's end and its
// children's release as often as anywhere else (200 workflows over about 40 s, some 40 kills); the sweeper and the reconciler must finish what
// the dead worker left. Checked once every workflow has ended: every workflow is done, every node
// done, every held node released exactly once (one `released` event on its timeline), and no
// node released before every parent had finished.
func TestChaosWorkflows(t *testing.T) {
	if os.Getenv("CHAOS") != "workflows" {
		t.Skip("set CHAOS=workflows (make chaos-workflows)")
	}
	bin := filepath.Join(t.TempDir(), "jobguard")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/jobguard").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	srv := redistest.Start(t)
	r := newRun(&run{t: t, bin: bin, redis: srv, rdb: srv.Client(t, 0), env: []string{"RATE_LIMIT=0"}})
	r.api = r.start("api", srv.Addr)
	for range 3 {
		r.startWorker()
	}

	const workflows = 200
	stop := make(chan struct{})
	var faults sync.WaitGroup
	faults.Add(1)
	go func() {
		defer faults.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(500+rand.IntN(1000)) * time.Millisecond):
			}
			w, _ := r.busyWorker(true)
			_ = w.cmd.Process.Signal(syscall.SIGKILL)
			r.kills.Add(1)
			r.startWorker()
		}
	}()

	ids := make([]string, 0, workflows)
	for i := range workflows {
		node := func(id string, parents ...string) string {
			ps, _ := json.Marshal(parents)
			if parents == nil {
				ps = []byte("[]")
			}
			return fmt.Sprintf(`{"id":%q,"type":"rebuild-cache","payload":{"tenant_id":"t1","resource_id":"w%d-%s"},"parents":%s}`, id, i, id, ps)
		}
		cleanup := strings.TrimSuffix(node("cleanup", "d", "e"), "}") + `,"policy":"all_ended"}`
		body := `{"tenant_id":"t1","nodes":[` + strings.Join([]string{node("a"), node("b", "a"), node("c", "a"),
			node("d", "b", "c"), node("e", "d"), cleanup}, ",") + `]}`
		id := postWorkflow(t, r.api.addr, body, fmt.Sprintf("wf-%d", i))
		ids = append(ids, id)
		time.Sleep(200 * time.Millisecond) // about 40 s of submissions, under the kills
	}

	views := map[string]wfView{}
	deadline := time.Now().Add(3 * time.Minute)
	for len(views) < len(ids) && time.Now().Before(deadline) {
		for _, id := range ids {
			if _, ok := views[id]; ok {
				continue
			}
			var v wfView
			if getJSON(r.api.addr, "/workflows/"+id, &v) == 200 && v.Status != "running" {
				views[id] = v
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	close(stop)
	faults.Wait()
	t.Logf("%d workflows, %d worker kills; %d ended within the deadline", len(ids), r.kills.Load(), len(views))
	if len(views) < len(ids) {
		for _, id := range ids {
			if _, ok := views[id]; ok {
				continue
			}
			var v wfView
			getJSON(r.api.addr, "/workflows/"+id, &v)
			hash := r.rdb.HGetAll(t.Context(), "jobguard:{wf:"+id+"}:wf").Val()
			t.Logf("workflow %s still running: hash %v", id, hash)
			for _, n := range v.Nodes {
				rec := r.rdb.HGetAll(t.Context(), "jobguard:{"+n.JobID[:16]+"}:job:"+n.JobID).Val()
				t.Logf("  node %s %s: status %s delivery %s updated_at %s confirmed %s", n.ID, n.JobID, rec["status"], rec["delivery"], rec["updated_at"], rec["confirmed"])
			}
		}
		t.Fatalf("%d workflows still running after 3 minutes", len(ids)-len(views))
	}
	released := 0
	for id, v := range views {
		if v.Status != "done" {
			t.Errorf("workflow %s ended %s: %+v", id, v.Status, v.Nodes)
			continue
		}
		finished := map[string]int64{}
		timelines := map[string][]jobEvent{}
		for _, n := range v.Nodes {
			var j jobView
			if getJSON(r.api.addr, "/jobs/"+n.JobID, &j) != 200 || j.Status != "done" {
				t.Errorf("workflow %s node %s: job %s is %q", id, n.ID, n.JobID, j.Status)
				continue
			}
			timelines[n.ID] = j.Timeline
			for _, e := range j.Timeline {
				if e.Event == "done" || e.Event == "already_applied" {
					finished[n.ID] = e.At
				}
			}
		}
		for _, n := range v.Nodes {
			if len(n.Parents) == 0 {
				continue
			}
			var at []int64
			for _, e := range timelines[n.ID] {
				if e.Event == "released" {
					at = append(at, e.At)
				}
			}
			if len(at) != 1 {
				t.Errorf("workflow %s node %s released %d times", id, n.ID, len(at))
				continue
			}
			released++
			for _, p := range n.Parents {
				if f, ok := finished[p]; !ok || f > at[0] {
					t.Errorf("workflow %s node %s released at %d, before its parent %s finished (%d)", id, n.ID, at[0], p, f)
				}
			}
		}
	}
	t.Logf("%d held nodes released once each, none before its parents", released)
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
}

type jobView struct {
	Status   string     `json:"status"`
	Timeline []jobEvent `json:"timeline"`
}

// postWorkflow creates a workflow as a careful client does: connection errors, 5xx and a 409 of
// its Idempotency-Key in flight are retried with the same key (the same workflow comes back).
func postWorkflow(t *testing.T, addr, body, key string) string {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	for try := 0; try < 40; try++ {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/workflows", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", `"`+key+`"`)
		resp, err := client.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var a struct {
				WorkflowID string `json:"workflow_id"`
			}
			if resp.StatusCode == http.StatusAccepted && json.Unmarshal(b, &a) == nil {
				return a.WorkflowID
			}
			if resp.StatusCode < 500 && resp.StatusCode != http.StatusConflict {
				t.Fatalf("POST /workflows: %d %s", resp.StatusCode, b)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatal("POST /workflows: no answer")
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
