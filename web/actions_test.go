package web_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/app"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/testsupport"
)

const ui = "/monitoring/api/queues/"

// Delete in the UI of a job's scheduled delivery cancels the job: it never runs, asynq no longer
// has the delivery, the timeline says the UI did it, and the same request is a new job (its dedup
// marker was released).
func TestUIDeleteCancelsTheJob(t *testing.T) {
	t.Parallel()
	b := startApp(t, nil)
	id, _ := b.submit(t, "t1", "order-1", 2*time.Second)
	d := b.job(t, id).delivery()
	if st := b.taskState(t, "default", d); st != "scheduled" {
		t.Fatalf("delivery %s is %s, want scheduled", d, st)
	}
	if code, out := b.do(t, http.MethodDelete, ui+"default/scheduled_tasks/"+d, ""); code != http.StatusNoContent {
		t.Fatalf("UI delete: %d %s", code, out)
	}
	v := b.job(t, id)
	last := v.Timeline[len(v.Timeline)-1]
	if v.Status != "cancelled" || last.Event != "cancelled" || !strings.Contains(last.Detail, "monitoring UI") {
		t.Fatalf("after the UI delete: status %s, last event %+v", v.Status, last)
	}
	if st := b.taskState(t, "default", d); st != "gone" {
		t.Fatalf("delivery after the UI delete: %s", st)
	}
	again, dedup := b.submit(t, "t1", "order-1", 3*time.Second)
	if dedup || again == id {
		t.Fatalf("the same request after the UI delete: job %s, deduplicated %v (the marker was kept)", again, dedup)
	}
	// The new job starts a second after the cancelled one would have: once it is done, the
	// cancelled one had its chance to run.
	b.waitStatus(t, again, "done")
	if n := b.probe.ran(id); n != 0 {
		t.Fatalf("the cancelled job ran %d times", n)
	}
}

// Delete in the UI of a retrying job's delivery (asynq's retry state) cancels the job: its
// delivery is gone from asynq, the timeline says the UI did it, and it does not run again.
func TestUIDeleteOfARetryCancelsTheJob(t *testing.T) {
	t.Parallel()
	b := startApp(t, nil)
	code, out := b.do(t, http.MethodPost, "/jobs/"+flakyType, `{"tenant_id":"t1","name":"flaky-1"}`)
	var a struct {
		JobID string `json:"job_id"`
	}
	if err := json.Unmarshal([]byte(out), &a); err != nil || code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", code, out)
	}
	d := b.waitStatus(t, a.JobID, "retrying").delivery()
	testsupport.Eventually(t, 20*time.Second, "asynq holds the failed delivery for its retry", func() bool {
		return b.taskState(t, "default", d) == "retry"
	})
	if code, out := b.do(t, http.MethodDelete, ui+"default/retry_tasks/"+d, ""); code != http.StatusNoContent {
		t.Fatalf("UI delete of the retry: %d %s", code, out)
	}
	v := b.job(t, a.JobID)
	last := v.Timeline[len(v.Timeline)-1]
	if v.Status != "cancelled" || last.Event != "cancelled" || !strings.Contains(last.Detail, "monitoring UI") {
		t.Fatalf("after the UI delete: status %s, last event %+v", v.Status, last)
	}
	if st := b.taskState(t, "default", d); st != "gone" {
		t.Fatalf("delivery after the UI delete: %s", st)
	}
	if n := b.probe.ran(a.JobID); n != 1 {
		t.Fatalf("the job ran %d times, want its one failed attempt", n)
	}
}

// Archive in the UI of a job's delivery cancels the job too; the delivery is removed, not kept as
// a dead letter (the dead-letter list holds failed jobs).
func TestUIArchiveCancelsTheJob(t *testing.T) {
	t.Parallel()
	b := startApp(t, nil)
	id, _ := b.submit(t, "t1", "order-a", time.Hour)
	d := b.job(t, id).delivery()
	if code, out := b.do(t, http.MethodPost, ui+"default/scheduled_tasks/"+d+":archive", ""); code != http.StatusNoContent {
		t.Fatalf("UI archive: %d %s", code, out)
	}
	if v := b.job(t, id); v.Status != "cancelled" || b.taskState(t, "default", d) != "gone" {
		t.Fatalf("after the UI archive: status %s, delivery %s", v.Status, b.taskState(t, "default", d))
	}
}

// Run in the UI of a failed job's archived delivery (its dead letter) replays the job, which runs
// to done; the dead letter is gone. A second run of it is a 404, and running the dead letter of a
// job that is not failed is the 409 of POST /jobs/{id}/retry.
func TestUIRunOfADeadLetterReplaysTheJob(t *testing.T) {
	t.Parallel()
	b := startApp(t, nil)
	b.probe.failing.Store(true)
	id, _ := b.submit(t, "t1", "order-2", 0)
	d := b.waitStatus(t, id, "failed").delivery()
	testsupport.Eventually(t, 10*time.Second, "asynq archives the failed delivery", func() bool {
		return b.taskState(t, "default", d) == "archived"
	})
	b.probe.failing.Store(false)
	if code, out := b.do(t, http.MethodPost, ui+"default/archived_tasks/"+d+":run", ""); code != http.StatusNoContent {
		t.Fatalf("UI run: %d %s", code, out)
	}
	if st := b.taskState(t, "default", d); st != "gone" {
		t.Fatalf("dead letter after the UI run: %s", st)
	}
	v := b.waitStatus(t, id, "done")
	if n := b.probe.ran(id); n != 2 || v.delivery() == d {
		t.Fatalf("replayed job: ran %d times (want 2), delivery %s (the dead letter was %s)", n, v.delivery(), d)
	}
	if code, out := b.do(t, http.MethodPost, ui+"default/archived_tasks/"+d+":run", ""); code != http.StatusNotFound {
		t.Fatalf("second UI run: %d %s", code, out)
	}

	// A dead letter whose job is done (put back by hand): the replay's rules refuse it, 409.
	if _, err := b.plain.Enqueue(asynq.NewTaskWithHeaders(probeType, nil, map[string]string{"jobguard-job-id": id}),
		asynq.TaskID("leftover"), asynq.Queue("default"), asynq.ProcessIn(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := b.insp.ArchiveTask("default", "leftover"); err != nil {
		t.Fatal(err)
	}
	code, out := b.do(t, http.MethodPost, ui+"default/archived_tasks/leftover:run", "")
	if code != http.StatusConflict || !strings.Contains(out, "job_not_failed") {
		t.Fatalf("UI run of a done job's dead letter: %d %s", code, out)
	}
	if st := b.taskState(t, "default", "leftover"); st != "archived" {
		t.Fatalf("the refused dead letter is %s, want archived", st)
	}
}

// The batch and "all" variants act on each task: jobguard deliveries through their jobs, other
// tasks as asynq does; ids asynq does not have are reported failed.
func TestUIBatchAndAllActOnEachJob(t *testing.T) {
	t.Parallel()
	b := startApp(t, nil)
	plainTask := func(id, queue string) {
		t.Helper()
		if _, err := b.plain.Enqueue(asynq.NewTask("plain", nil), asynq.TaskID(id), asynq.Queue(queue), asynq.ProcessIn(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	// batch_delete: two jobs and a plain task, and an unknown id.
	j1, _ := b.submit(t, "t1", "b-1", time.Hour)
	j2, _ := b.submit(t, "t1", "b-2", time.Hour)
	d1, d2 := b.job(t, j1).delivery(), b.job(t, j2).delivery()
	plainTask("plain-1", "default")
	body, _ := json.Marshal(map[string][]string{"task_ids": {d1, d2, "plain-1", "nope"}})
	code, out := b.do(t, http.MethodPost, ui+"default/scheduled_tasks:batch_delete", string(body))
	var del struct {
		Deleted []string `json:"deleted_ids"`
		Failed  []string `json:"failed_ids"`
	}
	if err := json.Unmarshal([]byte(out), &del); err != nil || code != http.StatusOK ||
		!slices.Equal(del.Deleted, []string{d1, d2, "plain-1"}) || !slices.Equal(del.Failed, []string{"nope"}) {
		t.Fatalf("batch_delete: %d %s", code, out)
	}
	for _, id := range []string{j1, j2} {
		if st := b.job(t, id).Status; st != "cancelled" {
			t.Fatalf("job %s after batch_delete: %s", id, st)
		}
	}
	if st := b.taskState(t, "default", "plain-1"); st != "gone" {
		t.Fatalf("plain task after batch_delete: %s", st)
	}

	// archive_all: a job is cancelled (its delivery removed), a plain task archived.
	j3, _ := b.submit(t, "t1", "b-3", time.Hour)
	d3 := b.job(t, j3).delivery()
	plainTask("plain-2", "default")
	code, out = b.do(t, http.MethodPost, ui+"default/scheduled_tasks:archive_all", "")
	if code != http.StatusOK || strings.TrimSpace(out) != `{"archived":2}` {
		t.Fatalf("archive_all: %d %s", code, out)
	}
	if st, ds, ps := b.job(t, j3).Status, b.taskState(t, "default", d3), b.taskState(t, "default", "plain-2"); st != "cancelled" || ds != "gone" || ps != "archived" {
		t.Fatalf("after archive_all: job %s, its delivery %s, plain task %s", st, ds, ps)
	}

	// batch_run on dead letters: two failed jobs are replayed and run to done.
	b.probe.failing.Store(true)
	j4, _ := b.submit(t, "t1", "b-4", 0)
	j5, _ := b.submit(t, "t1", "b-5", 0)
	d4, d5 := b.waitStatus(t, j4, "failed").delivery(), b.waitStatus(t, j5, "failed").delivery()
	testsupport.Eventually(t, 10*time.Second, "asynq archives both failed deliveries", func() bool {
		return b.taskState(t, "default", d4) == "archived" && b.taskState(t, "default", d5) == "archived"
	})
	b.probe.failing.Store(false)
	body, _ = json.Marshal(map[string][]string{"task_ids": {d4, d5}})
	code, out = b.do(t, http.MethodPost, ui+"default/archived_tasks:batch_run", string(body))
	var run struct {
		Pending []string `json:"pending_ids"`
		Errors  []string `json:"error_ids"`
	}
	if err := json.Unmarshal([]byte(out), &run); err != nil || code != http.StatusOK || len(run.Pending) != 2 || len(run.Errors) != 0 {
		t.Fatalf("batch_run: %d %s", code, out)
	}
	b.waitStatus(t, j4, "done")
	b.waitStatus(t, j5, "done")

	// run_all on dead letters: a failed job replays; the plain dead letter archived above runs as
	// asynq runs it (back to pending: it is in a queue no worker serves once moved there).
	b.probe.failing.Store(true)
	j6, _ := b.submit(t, "t1", "b-6", 0)
	b.waitStatus(t, j6, "failed")
	d6 := b.job(t, j6).delivery()
	testsupport.Eventually(t, 10*time.Second, "asynq archives the failed delivery", func() bool {
		return b.taskState(t, "default", d6) == "archived"
	})
	b.probe.failing.Store(false)
	if err := b.insp.DeleteTask("default", "plain-2"); err != nil {
		t.Fatal(err)
	}
	plainTask("plain-3", "idle")
	if err := b.insp.ArchiveTask("idle", "plain-3"); err != nil {
		t.Fatal(err)
	}
	code, out = b.do(t, http.MethodPost, ui+"default/archived_tasks:run_all", "")
	if code != http.StatusOK || strings.TrimSpace(out) != `{"scheduled":1}` {
		t.Fatalf("run_all: %d %s", code, out)
	}
	b.waitStatus(t, j6, "done")
	code, out = b.do(t, http.MethodPost, ui+"idle/archived_tasks:run_all", "")
	if code != http.StatusOK || strings.TrimSpace(out) != `{"scheduled":1}` || b.taskState(t, "idle", "plain-3") != "pending" {
		t.Fatalf("run_all of a plain dead letter: %d %s, task %s", code, out, b.taskState(t, "idle", "plain-3"))
	}
}

// A task that is not a jobguard delivery goes to asynqmon unchanged: its delete, archive and run
// are asynq's own.
func TestUIPlainTaskPassesThrough(t *testing.T) {
	t.Parallel()
	b := startApp(t, nil)
	for _, id := range []string{"p-del", "p-arch"} {
		if _, err := b.plain.Enqueue(asynq.NewTask("plain", nil), asynq.TaskID(id), asynq.Queue("idle")); err != nil {
			t.Fatal(err)
		}
	}
	if code, out := b.do(t, http.MethodDelete, ui+"idle/pending_tasks/p-del", ""); code != http.StatusNoContent || b.taskState(t, "idle", "p-del") != "gone" {
		t.Fatalf("delete: %d %s, task %s", code, out, b.taskState(t, "idle", "p-del"))
	}
	if code, out := b.do(t, http.MethodPost, ui+"idle/pending_tasks/p-arch:archive", ""); code != http.StatusNoContent || b.taskState(t, "idle", "p-arch") != "archived" {
		t.Fatalf("archive: %d %s, task %s", code, out, b.taskState(t, "idle", "p-arch"))
	}
	if code, out := b.do(t, http.MethodPost, ui+"idle/archived_tasks/p-arch:run", ""); code != http.StatusNoContent || b.taskState(t, "idle", "p-arch") != "pending" {
		t.Fatalf("run: %d %s, task %s", code, out, b.taskState(t, "idle", "p-arch"))
	}
	// A task asynq does not have: 404 (asynqmon answers 500 with asynq's error text).
	if code, out := b.do(t, http.MethodDelete, ui+"idle/pending_tasks/none", ""); code != http.StatusNotFound {
		t.Fatalf("delete of an unknown task: %d %s", code, out)
	}
}

// Read-only mode refuses the wrapped actions (asynqmon's 405) and the jobs and schedules pages'
// buttons: the job stays queued with its delivery, the schedule unpaused, and neither page shows
// a button.
func TestUIReadOnlyRefusesJobActions(t *testing.T) {
	t.Parallel()
	b := startApp(t, map[string]string{"MONITORING_READONLY": "true",
		"SCHEDULES": `[{"name":"ro-daily","spec":"@daily","type":"ui-probe","payload":{"tenant_id":"t1","name":"d"}}]`})
	id, _ := b.submit(t, "t1", "ro-1", time.Hour)
	d := b.job(t, id).delivery()
	for _, c := range []struct{ method, path, body string }{
		{http.MethodDelete, ui + "default/scheduled_tasks/" + d, ""},
		{http.MethodPost, ui + "default/scheduled_tasks/" + d + ":archive", ""},
		{http.MethodPost, ui + "default/scheduled_tasks:batch_delete", `{"task_ids":["` + d + `"]}`},
		{http.MethodDelete, ui + "default/scheduled_tasks:delete_all", ""},
		{http.MethodPost, "/monitoring/jobs/" + id + "/cancel", ""},
		{http.MethodPost, "/monitoring/jobs/" + id + "/retry", ""},
		{http.MethodPost, "/monitoring/schedules/ro-daily/pause", ""},
		{http.MethodPost, "/monitoring/schedules/ro-daily/resume", ""},
	} {
		if code, out := b.do(t, c.method, c.path, c.body); code != http.StatusMethodNotAllowed {
			t.Fatalf("%s %s in read-only mode: %d %s", c.method, c.path, code, out)
		}
	}
	if st, ds := b.job(t, id).Status, b.taskState(t, "default", d); st != "queued" || ds != "scheduled" {
		t.Fatalf("after the refused actions: job %s, delivery %s", st, ds)
	}
	code, page := b.do(t, http.MethodGet, "/monitoring/jobs/"+id, "")
	if code != http.StatusOK || strings.Contains(page, `id="cancel"`) || !strings.Contains(page, "Read-only") {
		t.Fatalf("job page in read-only mode: %d, cancel button shown %v", code, strings.Contains(page, `id="cancel"`))
	}
	code, page = b.do(t, http.MethodGet, "/monitoring/schedules", "")
	if code != http.StatusOK || !strings.Contains(page, "ro-daily") || strings.Contains(page, "<button") || !strings.Contains(page, "Read-only") {
		t.Fatalf("schedules page in read-only mode: %d\n%s", code, page)
	}
	if code, out := b.do(t, http.MethodGet, "/schedules", ""); code != http.StatusOK || !strings.Contains(out, `"paused":false`) {
		t.Fatalf("after the refused pause, GET /schedules: %d %s", code, out)
	}
}

// Pending deliveries (no worker): batch_archive and delete_all cancel their jobs and remove the
// deliveries; a plain pending task is deleted as asynq deletes it.
func TestUIPendingDeliveries(t *testing.T) {
	t.Parallel()
	b := startAppAs(t, app.RoleAPI, nil)
	j1, _ := b.submit(t, "t1", "p-1", 0)
	j2, _ := b.submit(t, "t1", "p-2", 0)
	j3, _ := b.submit(t, "t1", "p-3", 0)
	d1 := b.job(t, j1).delivery()
	if st := b.taskState(t, "default", d1); st != "pending" {
		t.Fatalf("delivery %s is %s, want pending", d1, st)
	}
	if _, err := b.plain.Enqueue(asynq.NewTask("plain", nil), asynq.TaskID("plain-p"), asynq.Queue("default")); err != nil {
		t.Fatal(err)
	}
	code, out := b.do(t, http.MethodPost, ui+"default/pending_tasks:batch_archive", `{"task_ids":["`+d1+`"]}`)
	if code != http.StatusOK || strings.TrimSpace(out) != `{"archived_ids":["`+d1+`"],"error_ids":[]}` {
		t.Fatalf("batch_archive: %d %s", code, out)
	}
	if st, ds := b.job(t, j1).Status, b.taskState(t, "default", d1); st != "cancelled" || ds != "gone" {
		t.Fatalf("after batch_archive: job %s, delivery %s", st, ds)
	}
	code, out = b.do(t, http.MethodDelete, ui+"default/pending_tasks:delete_all", "")
	if code != http.StatusOK || strings.TrimSpace(out) != `{"deleted":3}` {
		t.Fatalf("delete_all: %d %s", code, out)
	}
	for _, id := range []string{j2, j3} {
		if v := b.job(t, id); v.Status != "cancelled" || b.taskState(t, "default", v.delivery()) != "gone" {
			t.Fatalf("job %s after delete_all: %s", id, v.Status)
		}
	}
	if st := b.taskState(t, "default", "plain-p"); st != "gone" {
		t.Fatalf("plain task after delete_all: %s", st)
	}
}

// Cancel in the UI of a running delivery cancels its job (asynq's own cancel would only interrupt
// the run, which the engine retries): the record says cancelled at once and the handler's context
// ends with engine.ErrCancelled; cancel_all does it for every running job of the queue.
func TestUICancelOfARunningDeliveryCancelsTheJob(t *testing.T) {
	t.Parallel()
	b := startApp(t, map[string]string{"LEASE_TTL": "3s"})
	running := func(id string) string {
		t.Helper()
		v := b.waitStatus(t, id, "processing")
		testsupport.Eventually(t, 10*time.Second, "asynq has the delivery active", func() bool {
			return b.taskState(t, "default", v.delivery()) == "active"
		})
		return v.delivery()
	}
	j1, _ := b.submit(t, "t1", "block-1", 0)
	d1 := running(j1)
	// The jobs page shows the run's progress and live lease: an owner, its remaining TTL, fence 1.
	var page string
	testsupport.Eventually(t, 10*time.Second, "the page shows the run's progress", func() bool {
		_, page = b.do(t, http.MethodGet, "/monitoring/jobs/"+j1, "")
		return strings.Contains(page, `value="40"></progress> 40% · halfway`)
	})
	if !regexp.MustCompile(`<table id="lease">.*\n<tr><td class="mono">[^<]+:[0-9a-f]+</td><td>[0-9.]+m?s</td><td>1</td></tr>`).MatchString(page) {
		t.Fatalf("job page of a running job shows no live lease:\n%s", page)
	}
	if code, out := b.do(t, http.MethodPost, ui+"default/active_tasks/"+d1+":cancel", ""); code != http.StatusNoContent {
		t.Fatalf("UI cancel: %d %s", code, out)
	}
	if st := b.job(t, j1).Status; st != "cancelled" {
		t.Fatalf("after the UI cancel: %s", st)
	}
	j2, _ := b.submit(t, "t1", "block-2", 0)
	j3, _ := b.submit(t, "t1", "block-3", 0)
	d2, d3 := running(j2), running(j3)
	if code, out := b.do(t, http.MethodPost, ui+"default/active_tasks:cancel_all", ""); code != http.StatusNoContent {
		t.Fatalf("UI cancel_all: %d %s", code, out)
	}
	for i, id := range []string{j1, j2, j3} {
		if st := b.job(t, id).Status; st != "cancelled" {
			t.Fatalf("job %s: %s", id, st)
		}
		testsupport.Eventually(t, 15*time.Second, "the handler of "+id+" sees ErrCancelled", func() bool {
			return errors.Is(b.probe.cause(id), engine.ErrCancelled)
		})
		// The run is acknowledged, not failed: no dead letter of a cancelled job.
		d := []string{d1, d2, d3}[i]
		testsupport.Eventually(t, 10*time.Second, "asynq drops the delivery "+d, func() bool {
			return b.taskState(t, "default", d) == "gone"
		})
		if n := b.probe.ran(id); n != 1 || b.job(t, id).Status != "cancelled" {
			t.Fatalf("job %s ran %d times, is %s", id, n, b.job(t, id).Status)
		}
	}
}

// Delete in the UI of a delivery that a worker took between the page's load and the click (asynq
// refuses to delete an active task) cancels its job and answers as a delete does: the run is
// stopped by the cancel and asynq drops the delivery when its handler returns. Before, the cancel
// happened and the UI was answered 500.
func TestUIDeleteOfADeliveryJustTakenCancelsTheJob(t *testing.T) {
	t.Parallel()
	b := startApp(t, map[string]string{"LEASE_TTL": "3s"})
	id, _ := b.submit(t, "t1", "block-taken", 0)
	v := b.waitStatus(t, id, "processing")
	d := v.delivery()
	testsupport.Eventually(t, 10*time.Second, "asynq has the delivery active", func() bool {
		return b.taskState(t, "default", d) == "active"
	})
	if code, out := b.do(t, http.MethodDelete, ui+"default/pending_tasks/"+d, ""); code != http.StatusNoContent {
		t.Fatalf("UI delete of a delivery just taken: %d %s", code, out)
	}
	if st := b.job(t, id).Status; st != "cancelled" {
		t.Fatalf("after the UI delete: %s", st)
	}
	testsupport.Eventually(t, 15*time.Second, "the handler sees ErrCancelled", func() bool {
		return errors.Is(b.probe.cause(id), engine.ErrCancelled)
	})
	testsupport.Eventually(t, 10*time.Second, "asynq drops the delivery", func() bool {
		return b.taskState(t, "default", d) == "gone"
	})
}
