package web_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobguard/jobguard/app"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// pollPage waits, up to within, for the browser's expression expr to be non-empty and returns it;
// a click that navigates replaces the page the expression runs in, so a poll that loses its page
// is tried again. It fails the test with the page's text, naming what it waited for.
func pollPage(t *testing.T, ctx context.Context, within time.Duration, what, expr string) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		v, err := chromedp.Run(ctx, chromedp.Poll[string](expr, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(2*time.Second)))
		if err == nil {
			return v
		}
		if time.Now().After(deadline) {
			text, _ := chromedp.Run(ctx, chromedp.Evaluate[string]("document.body.innerText"))
			t.Fatalf("browser: %s: %v\npage text: %.2000s", what, err, text)
		}
	}
}

// In a browser: the jobs page lists a tenant's job, its page shows the timeline, and pressing
// Cancel cancels it (a same-origin form POST through the CSRF check) and shows it cancelled.
func TestBrowserJobsPageCancelsAJob(t *testing.T) {
	t.Parallel()
	ctx := testsupport.Browser(t)
	b := startApp(t, nil)
	id, _ := b.submit(t, "t1", "page-1", time.Hour)
	poll := func(what, expr string) string { t.Helper(); return pollPage(t, ctx, 20*time.Second, what, expr) }
	if err := chromedp.Do(ctx, chromedp.Navigate(b.base+"/monitoring/jobs?tenant=t1")); err != nil {
		t.Fatal(err)
	}
	if got := poll("the job is listed", `(() => { const a = document.querySelector("#jobs a"); return a ? a.textContent : ""; })()`); got != id {
		t.Fatalf("listed %q, want %q", got, id)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#jobs a"))); err != nil {
		t.Fatal(err)
	}
	events := poll("the timeline is shown", `[...document.querySelectorAll("#timeline td.event")].map(e => e.textContent).join(",")`)
	if !strings.HasPrefix(events, "enqueued") {
		t.Fatalf("timeline %q", events)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#cancel"))); err != nil {
		t.Fatal(err)
	}
	poll("the page shows the job cancelled", `(() => { const s = document.querySelector("#status"); return s && s.textContent === "cancelled" && !document.querySelector("#cancel") ? "yes" : ""; })()`)
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil || !strings.HasSuffix(loc, "/monitoring/jobs/"+id) {
		t.Fatalf("after the cancel the browser is at %q (%v)", loc, err)
	}
	v := b.job(t, id)
	last := v.Timeline[len(v.Timeline)-1]
	if v.Status != "cancelled" || !strings.Contains(last.Detail, "jobs page") {
		t.Fatalf("after the button: status %s, last event %+v", v.Status, last)
	}
}

// The jobs page over HTTP: search by id, a tenant's list by status with cursor pagination, a job's
// lease, deliveries linked to asynqmon and no payload; an unknown job; a retry button on a failed
// job; a cross-origin cancel refused.
func TestJobsPage(t *testing.T) {
	t.Parallel()
	b := startApp(t, nil)
	var ids []string
	for _, name := range []string{"l-1", "l-2", "l-3"} {
		id, _ := b.submit(t, "t1", name, time.Hour)
		ids = append(ids, id)
	}
	if code, _ := b.do(t, http.MethodGet, "/monitoring/jobs?id="+ids[0], ""); code != http.StatusSeeOther {
		t.Fatalf("search by id: %d", code)
	}
	// Newest first, two a page; the next link continues.
	code, page := b.do(t, http.MethodGet, "/monitoring/jobs?tenant=t1&status=queued&limit=2", "")
	listed := regexp.MustCompile(`<a href="/monitoring/jobs/([^"]+)">`).FindAllStringSubmatch(page, -1)
	next := regexp.MustCompile(`<a href="([^"]+)" id="next">`).FindStringSubmatch(page)
	if code != http.StatusOK || len(listed) != 2 || listed[0][1] != ids[2] || listed[1][1] != ids[1] || next == nil {
		t.Fatalf("first page: %d, listed %v, next %v", code, listed, next)
	}
	code, page = b.do(t, http.MethodGet, strings.ReplaceAll(next[1], "&amp;", "&"), "")
	listed = regexp.MustCompile(`<a href="/monitoring/jobs/([^"]+)">`).FindAllStringSubmatch(page, -1)
	if code != http.StatusOK || len(listed) != 1 || listed[0][1] != ids[0] {
		t.Fatalf("second page: %d, listed %v", code, listed)
	}
	if _, page = b.do(t, http.MethodGet, "/monitoring/jobs?tenant=t1&status=done", ""); !strings.Contains(page, "no jobs on this page") {
		t.Fatal("status filter: done jobs listed")
	}
	// Without a tenant: every tenant's jobs, newest first.
	other, _ := b.submit(t, "t2", "l-other", time.Hour)
	_, page = b.do(t, http.MethodGet, "/monitoring/jobs", "")
	listed = regexp.MustCompile(`<a href="/monitoring/jobs/([^"]+)">`).FindAllStringSubmatch(page, -1)
	if len(listed) != 4 || listed[0][1] != other || !strings.Contains(page, "<td>t2</td>") {
		t.Fatalf("every tenant's jobs: listed %v", listed)
	}
	if _, page = b.do(t, http.MethodGet, "/monitoring/jobs?tenant=t1", ""); strings.Contains(page, other) {
		t.Fatal("t1's list shows t2's job")
	}

	code, page = b.do(t, http.MethodGet, "/monitoring/jobs/"+ids[0], "")
	d := b.job(t, ids[0]).delivery()
	if code != http.StatusOK || !strings.Contains(page, `href="/monitoring/queues/default/tasks/`+d+`"`) ||
		!strings.Contains(page, "scheduled") || !strings.Contains(page, `id="cancel"`) || strings.Contains(page, `id="retry"`) ||
		strings.Contains(page, "tenant_id") || !strings.Contains(page, "bytes)") {
		t.Fatalf("job page: %d\n%s", code, page)
	}
	if code, _ = b.do(t, http.MethodGet, "/monitoring/jobs/0123456789abcdef-00000000000000000000000000ff", ""); code != http.StatusNotFound {
		t.Fatalf("unknown job: %d", code)
	}

	// A cross-origin POST is refused before it reaches the job.
	code, _ = b.do(t, http.MethodPost, "/monitoring/jobs/"+ids[0]+"/cancel", "", "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example")
	if code != http.StatusForbidden || b.job(t, ids[0]).Status != "queued" {
		t.Fatalf("cross-origin cancel: %d, job %s", code, b.job(t, ids[0]).Status)
	}
	// The cancel button's POST, then a second one: the job has ended (409).
	if code, out := b.do(t, http.MethodPost, "/monitoring/jobs/"+ids[0]+"/cancel", ""); code != http.StatusSeeOther || b.job(t, ids[0]).Status != "cancelled" {
		t.Fatalf("cancel: %d %s", code, out)
	}
	if code, out := b.do(t, http.MethodPost, "/monitoring/jobs/"+ids[0]+"/cancel", ""); code != http.StatusConflict || !strings.Contains(out, "job_ended") {
		t.Fatalf("second cancel: %d %s", code, out)
	}

	// A failed job has a retry button, and its POST replays it to done.
	b.probe.failing.Store(true)
	f, _ := b.submit(t, "t1", "l-fail", 0)
	b.waitStatus(t, f, "failed")
	b.probe.failing.Store(false)
	if _, page = b.do(t, http.MethodGet, "/monitoring/jobs/"+f, ""); !strings.Contains(page, `id="retry"`) || strings.Contains(page, `id="cancel"`) {
		t.Fatalf("failed job's page:\n%s", page)
	}
	if code, out := b.do(t, http.MethodPost, "/monitoring/jobs/"+f+"/retry", ""); code != http.StatusSeeOther {
		t.Fatalf("retry: %d %s", code, out)
	}
	b.waitStatus(t, f, "done")
}

// The schedules page lists each schedule with its spec and next tick, and the leader once a
// worker holds the scheduler's lease; behind the UI's basic auth, its Pause and Resume buttons'
// POSTs pause and resume the schedule (as the API sees it) and send the browser back (303); an
// unknown schedule is 404, a GET of a button's URL 405, a cross-origin POST 403.
func TestSchedulesPage(t *testing.T) {
	t.Parallel()
	b := startApp(t, map[string]string{
		"SCHEDULES":       `[{"name":"nightly-probe","spec":"0 30 2 * * *","type":"ui-probe","timezone":"Europe/Berlin","payload":{"tenant_id":"t1","name":"n"}}]`,
		"MONITORING_USER": "admin", "MONITORING_PASSWORD": "s3cret",
	})
	auth := []string{"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte("admin:s3cret"))}
	var page string
	testsupport.Eventually(t, 20*time.Second, "the schedules page names the leader", func() bool {
		var code int
		code, page = b.do(t, http.MethodGet, "/monitoring/schedules", "", auth...)
		return code == http.StatusOK && strings.Contains(page, `id="leader"`)
	})
	for _, want := range []string{"nightly-probe", "0 30 2 * * *", "Europe/Berlin", "ui-probe",
		`<form class="inline" method="post" action="/monitoring/schedules/nightly-probe/pause"><button type="submit" class="pause">`} {
		if !strings.Contains(page, want) {
			t.Fatalf("schedules page lacks %q:\n%s", want, page)
		}
	}
	if !regexp.MustCompile(`<td>\d{4}-\d\d-\d\d 0[01]:30:00\.000Z</td>`).MatchString(page) {
		t.Fatalf("no next tick at 02:30 Berlin (00:30 or 01:30 UTC):\n%s", page)
	}
	paused := func() bool {
		t.Helper()
		code, out := b.do(t, http.MethodGet, "/schedules", "")
		var ov struct {
			Schedules []struct {
				Paused bool `json:"paused"`
			} `json:"schedules"`
		}
		if err := json.Unmarshal([]byte(out), &ov); err != nil || code != http.StatusOK || len(ov.Schedules) != 1 {
			t.Fatalf("GET /schedules: %d %s", code, out)
		}
		return ov.Schedules[0].Paused
	}
	if code, _ := b.do(t, http.MethodPost, "/monitoring/schedules/nightly-probe/pause", ""); code != http.StatusUnauthorized || paused() {
		t.Fatalf("pause without the UI's credentials: %d, paused %v", code, paused())
	}
	if code, _ := b.do(t, http.MethodPost, "/monitoring/schedules/nightly-probe/pause", "", append(auth, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example")...); code != http.StatusForbidden || paused() {
		t.Fatalf("cross-origin pause: %d, paused %v", code, paused())
	}
	if code, _ := b.do(t, http.MethodGet, "/monitoring/schedules/nightly-probe/pause", "", auth...); code != http.StatusMethodNotAllowed {
		t.Fatalf("GET of the pause URL: %d", code)
	}
	if code, out := b.do(t, http.MethodPost, "/monitoring/schedules/nope/pause", "", auth...); code != http.StatusNotFound || !strings.Contains(out, `"field":"name"`) {
		t.Fatalf("pause of an unknown schedule: %d %s", code, out)
	}
	if code, out := b.do(t, http.MethodPost, "/monitoring/schedules/nightly-probe/pause", "", auth...); code != http.StatusSeeOther || !paused() {
		t.Fatalf("pause: %d %s, paused %v", code, out, paused())
	}
	_, page = b.do(t, http.MethodGet, "/monitoring/schedules", "", auth...)
	if !strings.Contains(page, `<td class="paused">paused</td>`) || !strings.Contains(page, `action="/monitoring/schedules/nightly-probe/resume"`) || strings.Contains(page, `class="pause"`) {
		t.Fatalf("schedules page after the pause:\n%s", page)
	}
	if code, out := b.do(t, http.MethodPost, "/monitoring/schedules/nightly-probe/resume", "", auth...); code != http.StatusSeeOther || paused() {
		t.Fatalf("resume: %d %s, paused %v", code, out, paused())
	}
}

// In a browser: the schedules page's Pause button pauses the schedule and the page shows it
// paused with a Resume button, which resumes it.
func TestBrowserSchedulesPagePausesAndResumes(t *testing.T) {
	t.Parallel()
	ctx := testsupport.Browser(t)
	b := startApp(t, map[string]string{
		"SCHEDULES": `[{"name":"probe-daily","spec":"@daily","type":"ui-probe","payload":{"tenant_id":"t1","name":"d"}}]`,
	})
	state := `(() => { const r = [...document.querySelectorAll("#schedules tr")].find(r => r.querySelector("td.name")?.textContent === "probe-daily");
		if (!r) return ""; return r.querySelector("td.paused").textContent + "|" + (r.querySelector("button")?.className ?? ""); })()`
	// wait polls the page for state want; a click that navigates replaces the page the expression
	// runs in, so a poll that loses its page is tried again.
	wait := func(want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			v, err := chromedp.Run(ctx, chromedp.Poll[bool](`(`+state+`) === "`+want+`"`, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(2*time.Second)))
			if err == nil && v {
				return
			}
			if time.Now().After(deadline) {
				text, _ := chromedp.Run(ctx, chromedp.Evaluate[string]("document.body.innerText"))
				t.Fatalf("browser: schedule state never %q: %v\npage text: %.2000s", want, err, text)
			}
		}
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(b.base+"/monitoring/schedules")); err != nil {
		t.Fatal(err)
	}
	wait("|pause")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#schedules button.pause"))); err != nil {
		t.Fatal(err)
	}
	wait("paused|resume")
	if code, out := b.do(t, http.MethodGet, "/schedules", ""); code != http.StatusOK || !strings.Contains(out, `"paused":true`) {
		t.Fatalf("after the Pause button, GET /schedules: %d %s", code, out)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#schedules button.resume"))); err != nil {
		t.Fatal(err)
	}
	wait("|pause")
	if code, out := b.do(t, http.MethodGet, "/schedules", ""); code != http.StatusOK || !strings.Contains(out, `"paused":false`) {
		t.Fatalf("after the Resume button, GET /schedules: %d %s", code, out)
	}
}

// The jobs page shows each fairly dispatched type's admission layer: its capacity, the jobs
// admitted, the keys waiting and the top keys' waiting and running jobs. No worker: the first job
// is admitted (capacity 1) and the others wait for their keys' turns.
func TestJobsPageShowsFairDispatch(t *testing.T) {
	t.Parallel()
	b := startAppAs(t, app.RoleAPI, map[string]string{"TASK_LIMITS": probeType + "=fair:on,capacity:1"})
	b.submit(t, "t1", "f-1", 0)
	b.submit(t, "t1", "f-2", 0)
	b.submit(t, "t2", "f-3", 0)
	code, page := b.do(t, http.MethodGet, "/monitoring/jobs", "")
	row := regexp.MustCompile(`<tr data-type="` + probeType + `">.*</tr>`).FindString(page)
	for _, want := range []string{`class="fair-capacity">1<`, `class="fair-admitted">1<`, `class="fair-waiting-keys">2<`,
		`data-key="t1">t1 1 / 1<`, `data-key="t2">t2 1 / 0<`} {
		if code != http.StatusOK || !strings.Contains(row, want) {
			t.Fatalf("jobs page's fair dispatch row lacks %s: %d\n%s", want, code, row)
		}
	}
}
