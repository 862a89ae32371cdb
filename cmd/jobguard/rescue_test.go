package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/redistest"
)

// upstream is a rebuild source whose first request hangs until released.
type upstream struct {
	*httptest.Server
	first   chan struct{} // closed when the first request arrived
	release chan struct{}
	calls   atomic.Int32
}

func newUpstream(t testing.TB) *upstream {
	u := &upstream{first: make(chan struct{}), release: make(chan struct{})}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := u.calls.Add(1)
		if n == 1 {
			close(u.first)
			<-u.release
		}
		fmt.Fprintf(w, "value-%d", n)
	}))
	t.Cleanup(func() {
		select {
		case <-u.release:
		default:
			close(u.release)
		}
		u.Close()
	})
	return u
}

type jobState struct {
	Status   string `json:"status"`
	WorkerID string `json:"worker_id"`
	Attempt  int    `json:"attempt"`
	Fencing  int64  `json:"fencing_token"`
}

func (p *proc) job(t testing.TB, id string) jobState {
	_, body := p.get(t, "/jobs/"+id)
	var s jobState
	_ = json.Unmarshal([]byte(body), &s)
	return s
}

// cluster of one API and two workers with a 2 s lease, on a fresh database.
func rescueSetup(t *testing.T) (api *proc, workers []*proc, src *upstream, jobID string) {
	src = newUpstream(t)
	env := []string{"REDIS_URL=" + redistest.NewDB(t).URL(), "LEASE_TTL=2s", "RESCUE_INTERVAL=500ms",
		"REBUILD_SOURCE_URL=" + src.URL, "WORKER_CONCURRENCY=2"}
	api = startProc(t, []string{"api"}, env...)
	workers = []*proc{startProc(t, []string{"worker"}, env...), startProc(t, []string{"worker"}, env...)}
	jobID = enqueueRebuild(t, api)
	select {
	case <-src.first:
	case <-time.After(15 * time.Second):
		t.Fatal("no worker picked the job up")
	}
	return api, workers, src, jobID
}

func enqueueRebuild(t testing.TB, api *proc) string {
	resp, err := http.Post("http://"+api.addr+"/jobs/rebuild-cache", "application/json",
		strings.NewReader(`{"tenant_id":"t1","resource_id":"home"}`))
	if err != nil || resp.StatusCode != 202 {
		t.Fatalf("enqueue: %v %v", resp, err)
	}
	defer resp.Body.Close()
	var a struct {
		JobID string `json:"job_id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&a)
	return a.JobID
}

// holder returns the worker process running the job, and the other one.
func holder(t *testing.T, api *proc, workers []*proc, id string) (*proc, *proc) {
	s := api.job(t, id)
	for i, w := range workers {
		if strings.HasSuffix(s.WorkerID, "-"+strconv.Itoa(w.cmd.Process.Pid)) {
			return w, workers[1-i]
		}
	}
	t.Fatalf("job held by %q, not one of the workers", s.WorkerID)
	return nil, nil
}

func waitDone(t testing.TB, api *proc, id string, within time.Duration) (jobState, time.Duration) {
	start := time.Now()
	for {
		s := api.job(t, id)
		if s.Status == "done" {
			return s, time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("job %s still %+v after %s", id, s, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill -9 of the worker running a job: another worker finishes it within about LEASE_TTL.
func TestKilledWorkersJobIsRescued(t *testing.T) {
	t.Parallel()
	api, workers, src, id := rescueSetup(t)
	dead, _ := holder(t, api, workers, id)
	if err := dead.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s, took := waitDone(t, api, id, 2*time.Second+500*time.Millisecond+3*time.Second)
	t.Logf("job done %s after kill -9 (LEASE_TTL 2s, RESCUE_INTERVAL 500ms)", took)
	if s.Attempt != 2 || s.Fencing != 2 || src.calls.Load() != 2 {
		t.Fatalf("after rescue: %+v, %d upstream calls", s, src.calls.Load())
	}
}

// SIGSTOP past the lease, then SIGCONT: exactly one effect; the woken worker's writes are rejected.
func TestPausedWorkerIsFencedOut(t *testing.T) {
	t.Parallel()
	api, workers, src, id := rescueSetup(t)
	paused, _ := holder(t, api, workers, id)
	if err := paused.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	s, _ := waitDone(t, api, id, 10*time.Second)
	if err := paused.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	close(src.release) // the paused worker's source read returns; it tries to write
	// Its run ends with its lease lost (the keeper's validity timer fires on wake-up), or with its
	// cache write rejected as stale: either way it logs it.
	deadline := time.After(10 * time.Second)
	for woke := false; !woke; {
		select {
		case line := <-paused.logs:
			woke = strings.Contains(line, `"event":"lease_lost"`) || strings.Contains(line, "stale fencing token")
		case <-deadline:
			t.Fatal("the woken worker never reported its lost lease or stale write")
		}
	}
	var entry struct {
		Value        string `json:"value"`
		Version      int64  `json:"version"`
		FencingToken int64  `json:"fencing_token"`
	}
	_, body := api.get(t, "/cache/t1/home")
	_ = json.Unmarshal([]byte(body), &entry)
	if entry.Version != 1 || entry.Value != "value-2" || entry.FencingToken != s.Fencing {
		t.Fatalf("cache %s after the woken worker wrote (job %+v)", body, s)
	}
	if after := api.job(t, id); after.Status != "done" || after.Fencing != s.Fencing {
		t.Fatalf("the woken worker changed the job: %+v", after)
	}
	if _, timeline := api.get(t, "/jobs/"+id); !strings.Contains(timeline, `"event":"rescued"`) {
		t.Fatalf("timeline %s", timeline)
	}
}

// holdingUpstream is a rebuild source whose every request waits until released (or its caller
// gives up), counting the requests: a handler run is a request.
type holdingUpstream struct {
	*httptest.Server
	release chan struct{}
	calls   atomic.Int32
}

func newHoldingUpstream(t testing.TB) *holdingUpstream {
	u := &holdingUpstream{release: make(chan struct{})}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := u.calls.Add(1)
		select {
		case <-u.release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprintf(w, "value-%d", n)
	}))
	t.Cleanup(func() {
		select {
		case <-u.release:
		default:
			close(u.release)
		}
		u.CloseClientConnections()
		u.Close()
	})
	return u
}

type timelineView struct {
	Status   string `json:"status"`
	Timeline []struct {
		Event string `json:"event"`
	} `json:"timeline"`
}

func (p *proc) timeline(t testing.TB, id string) (timelineView, []string) {
	_, body := p.get(t, "/jobs/"+id)
	var v timelineView
	_ = json.Unmarshal([]byte(body), &v)
	var names []string
	for _, e := range v.Timeline {
		names = append(names, e.Event)
	}
	return v, names
}

// A cancel of a job whose worker was killed -9 mid-run, answered before the rescue (the rescuer
// then leaves it), after it (the rescue's delivery is deleted, or its run fenced out), or while the
// rescued delivery runs on the other worker (its run fenced out and its context cancelled): one
// outcome, cancelled, no run of the handler starts after the answer, and none writes. The source
// holds every request, so no run can finish before the cancel.
func TestCancelDuringAKillRescue(t *testing.T) {
	t.Parallel()
	for _, when := range []string{"before the rescue", "after the rescue", "during the rescued run"} {
		t.Run(when, func(t *testing.T) {
			t.Parallel()
			src := newHoldingUpstream(t)
			url := redistest.NewDB(t).URL()
			env := []string{"REDIS_URL=" + url, "LEASE_TTL=2s", "RESCUE_INTERVAL=500ms", "REBUILD_SOURCE_URL=" + src.URL, "WORKER_CONCURRENCY=2"}
			api := startProc(t, []string{"api"}, env...)
			workers := []*proc{startProc(t, []string{"worker"}, env...), startProc(t, []string{"worker"}, env...)}
			id := enqueueRebuild(t, api)
			deadline := time.Now().Add(15 * time.Second)
			for src.calls.Load() == 0 || api.job(t, id).Status != "processing" {
				if time.Now().After(deadline) {
					t.Fatal("no worker picked the job up")
				}
				time.Sleep(20 * time.Millisecond)
			}
			dead, _ := holder(t, api, workers, id)
			if err := dead.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if when == "after the rescue" {
				deadline := time.Now().Add(10 * time.Second)
				for _, events := api.timeline(t, id); !strings.Contains(strings.Join(events, ","), "rescued"); _, events = api.timeline(t, id) {
					if time.Now().After(deadline) {
						t.Fatalf("not rescued within 10s: %v", events)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			if when == "during the rescued run" {
				deadline := time.Now().Add(10 * time.Second)
				for src.calls.Load() < 2 {
					if time.Now().After(deadline) {
						t.Fatal("the rescued delivery did not start within 10s")
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			code, out, errOut := jobsCmd(t, []string{"JOBGUARD_URL=http://" + api.addr}, "cancel", id, "--reason", "kill test")
			runs := src.calls.Load() // the runs that started before the answer
			if code != 0 {
				t.Fatalf("cancel: exit %d %q %q", code, out, errOut)
			}
			t.Logf("%s: %s", when, strings.TrimSpace(out))
			// Past a rescue's reach (lease TTL, rescue interval) and a lost run's renewal: the job
			// stays cancelled and no handler run starts.
			watch := time.Now().Add(2*2*time.Second + time.Second)
			for time.Now().Before(watch) {
				if s := api.job(t, id); s.Status != "cancelled" || src.calls.Load() != runs {
					t.Fatalf("after the cancel: %+v, %d runs (were %d at the answer)", s, src.calls.Load(), runs)
				}
				time.Sleep(50 * time.Millisecond)
			}
			close(src.release) // a run still waiting on the source returns: it must write nothing
			v, events := api.timeline(t, id)
			ends := 0
			for _, e := range events {
				switch e {
				case "done", "failed", "cancelled", "revoked", "expired":
					ends++
				}
			}
			if v.Status != "cancelled" || ends != 1 || events[len(events)-1] == "done" {
				t.Fatalf("%s, timeline %v", v.Status, events)
			}
			if when == "before the rescue" && (runs != 1 || strings.Contains(strings.Join(events, ","), "rescued")) {
				t.Fatalf("cancelled before the rescue, yet %d runs, timeline %v", runs, events)
			}
			if when == "during the rescued run" && (runs != 2 || !strings.Contains(out, "was processing")) {
				t.Fatalf("cancelled during the rescued run: %d runs, %q", runs, out)
			}
			if code, body := api.get(t, "/cache/t1/home"); code != 404 {
				t.Fatalf("a cancelled run wrote the cache: %d %s", code, body)
			}
		})
	}
}
