package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
	"github.com/jobguard/jobguard/locking"
)

// scrape reads a process's /metrics; value returns a sample whose labels include all of want.
type scraped string

func scrape(t *testing.T, r *running) scraped {
	t.Helper()
	resp, body := get(t, r.base+"/metrics")
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d", resp.StatusCode)
	}
	return scraped(body)
}

func (s scraped) value(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(s)))
	if err != nil {
		t.Fatal(err)
	}
	fam, ok := families[name]
	if !ok {
		return 0
	}
	total := 0.0
	for _, m := range fam.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			if labels[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil:
			total += float64(m.Histogram.GetSampleCount())
		}
	}
	return total
}

// A scripted run against an API and a worker process moves each counter by what happened.
func TestMetricsAfterAScriptedRun(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := map[string]int{}
	hold := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res := r.URL.Query().Get("resource_id")
		mu.Lock()
		calls[res]++
		n := calls[res]
		mu.Unlock()
		switch {
		case res == "flaky" && n == 1:
			w.WriteHeader(503)
		case res == "missing":
			w.WriteHeader(404)
		case res == "held":
			<-hold
		}
		fmt.Fprint(w, "v")
	}))
	defer up.Close()
	db := redistest.NewDB(t)
	env := map[string]string{"REDIS_URL": db.URL(), "REBUILD_SOURCE_URL": up.URL}
	api := startApp(t, RoleAPI, env)

	// Before any worker runs: a duplicate order (dedup) and a replayed Idempotency-Key.
	order := `{"tenant_id":"t1","order_id":"o1","sku":"s","quantity":1}`
	post(t, api, "/jobs/reserve-stock", order)
	post(t, api, "/jobs/reserve-stock", order)
	key := []string{"Idempotency-Key", `"k"`}
	post(t, api, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"ok"}`, key...)
	post(t, api, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"ok"}`, key...)
	post(t, api, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"flaky"}`)
	post(t, api, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"missing"}`)
	_, held := post(t, api, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"held"}`)
	heldID := strings.Split(strings.Split(held, `"job_id":"`)[1], `"`)[0]

	worker := startApp(t, RoleWorker, env)
	waitJob(t, api, heldID, "processing")
	// While "held" runs, a newer token is drawn and takes its record: the run's cache write is then
	// refused (the counter moved past its token), its retry's finish is rejected as stale, and
	// asynq's retry of the delivery draws a token above the newer one and completes the job.
	locks := locking.New(db.Client, locking.WithPrefix("jobguard"))
	tag := engine.ResourceTag("t1:held")
	newer := db.Client.Incr(context.Background(), locks.FenceKey(tag)).Val()
	if err := locks.SetFields(context.Background(), locking.Fence{Token: newer, Owner: "other"}, locks.Key(tag, "job:"+heldID), 0, "note", "taken"); err != nil {
		t.Fatal(err)
	}
	close(hold)

	var w scraped
	testsupport.Eventually(t, 20*time.Second, "all runs concluded", func() bool {
		w = scrape(t, worker)
		return w.value(t, "jobguard_job_transitions_total", map[string]string{"status": "done"}) >= 4 &&
			w.value(t, "jobguard_dead_lettered_total", nil) >= 1 &&
			w.value(t, "jobguard_stale_writes_rejected_total", nil) >= 1
	})
	a := scrape(t, api)
	for _, c := range []struct {
		s      scraped
		name   string
		labels map[string]string
		want   float64
	}{
		{a, "jobguard_dedup_hits_total", map[string]string{"type": "reserve-stock", "policy": "until_done", "result": "deduplicated"}, 1},
		{a, "jobguard_http_idempotency_total", map[string]string{"result": "new"}, 1},
		{a, "jobguard_http_idempotency_total", map[string]string{"result": "replayed"}, 1},
		{a, "jobguard_http_requests_total", map[string]string{"route": "/jobs/rebuild-cache", "code": "202"}, 5},
		{w, "jobguard_job_transitions_total", map[string]string{"type": "rebuild-cache", "status": "done"}, 3},
		{w, "jobguard_job_transitions_total", map[string]string{"type": "reserve-stock", "status": "done"}, 1},
		{w, "jobguard_retries_total", map[string]string{"type": "rebuild-cache", "class": "transient"}, 2},
		{w, "jobguard_dead_lettered_total", map[string]string{"type": "rebuild-cache"}, 1},
		{w, "jobguard_stale_writes_rejected_total", map[string]string{"type": "rebuild-cache"}, 1},
		{w, "jobguard_lease_events_total", map[string]string{"event": "acquired"}, 7},
		{w, "jobguard_job_run_duration_seconds", map[string]string{"type": "rebuild-cache"}, 6},
		{w, "jobguard_zombie_handlers", nil, 0},
		{w, "jobguard_running_handlers", nil, 0},
	} {
		if got := c.s.value(t, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if w.value(t, "jobguard_asynq_queue_tasks", map[string]string{"queue": "default", "state": "archived"}) != 1 {
		t.Errorf("asynq queue gauges: archived in default is not 1")
	}
	for _, name := range []string{"jobguard_zombie_handlers", "jobguard_rescue_latency_seconds", "go_goroutines", "asynq_queue_size", "asynq_tasks_processed_total"} {
		if !strings.Contains(string(w), name) {
			t.Errorf("%s missing from the worker's metrics", name)
		}
	}
	// promtool (Debian's prometheus package) checks names and conventions when it is installed.
	if path, err := exec.LookPath("promtool"); err == nil {
		for _, s := range []scraped{a, w} {
			cmd := exec.Command(path, "check", "metrics")
			cmd.Stdin = strings.NewReader(string(s))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("promtool check metrics: %v\n%s", err, out)
			}
		}
	}
}
