package web_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobguard/jobguard/internal/testsupport"
)

// submitTagged posts a probe job with tags (delayed by delay) and returns its id.
func (b *bundle) submitTagged(t *testing.T, tenant, name string, delay time.Duration, tags ...string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"tenant_id": tenant, "name": name, "delay_ms": delay.Milliseconds(), "tags": tags})
	code, out := b.do(t, http.MethodPost, "/jobs/"+probeType, string(body))
	var a struct {
		JobID string `json:"job_id"`
	}
	if err := json.Unmarshal([]byte(out), &a); err != nil || code != http.StatusAccepted {
		t.Fatalf("submit %s: %d %s", name, code, out)
	}
	return a.JobID
}

var listedIDs = regexp.MustCompile(`<a href="/monitoring/jobs/([0-9a-f]{16}-[0-9a-f]+)">`)

func listed(page string) []string {
	var ids []string
	for _, m := range listedIDs.FindAllStringSubmatch(page, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

// The jobs page over HTTP: search by tags (any, all), error text and window; counts per status
// and type; the bulk cancel's confirmation acts on nothing, its POST needs the confirmation and
// the same origin, then cancels the search's jobs and says how many it acted on and skipped;
// progress only where a handler reported some; asynqmon's page carries the banner.
func TestJobsPageSearchCountsAndBulk(t *testing.T) {
	t.Parallel()
	b := startApp(t, nil)
	red := b.submitTagged(t, "t1", "s-red", time.Hour, "red")
	both := b.submitTagged(t, "t1", "s-both", time.Hour, "red", "blue")
	blue := b.submitTagged(t, "t1", "s-blue", time.Hour, "blue")
	other := b.submitTagged(t, "t2", "s-other", time.Hour, "red")
	done := b.submitTagged(t, "t1", "s-done", 0, "blue")
	b.waitStatus(t, done, "done")

	get := func(path string) string {
		t.Helper()
		code, page := b.do(t, http.MethodGet, path, "")
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %.500s", path, code, page)
		}
		return page
	}
	for query, want := range map[string][]string{
		"tenant=t1&tags=red":                        {both, red},
		"tenant=t1&tags=red,blue":                   {done, blue, both, red},
		"tenant=t1&tags=red+blue&match=all":         {both},
		"tags=red":                                  {other, both, red},
		"tenant=t1&tags=blue&status=done":           {done},
		"tenant=t1&error=no+such+error":             nil,
		"tenant=t1&since=1h":                        {done, blue, both, red},
		"tenant=t1&created_before=2000-01-01T00:00": nil,
	} {
		// As sets: jobs of one millisecond are listed in id order (the store's tests cover the order).
		got := listed(get("/monitoring/jobs?" + query))
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: listed %v, want %v", query, got, want)
		}
	}
	if code, _ := b.do(t, http.MethodGet, "/monitoring/jobs?tenant=t1&tags=a+b%21", ""); code != http.StatusBadRequest {
		t.Errorf("a bad tag: %d", code)
	}
	if code, _ := b.do(t, http.MethodGet, "/monitoring/jobs?created_after=yesterday", ""); code != http.StatusBadRequest {
		t.Errorf("a bad window: %d", code)
	}
	page := get("/monitoring/jobs?tenant=t1&status=queued")
	for _, want := range []string{`data-status="queued"><a href="/monitoring/jobs?status=queued&amp;tenant=t1">3</a>`,
		`data-status="done"><a href="/monitoring/jobs?status=done&amp;tenant=t1">1</a>`, `data-type="ui-probe">4<`,
		`<td class="tags">red, blue</td>`, `<script src="/monitoring/jobs.js" defer></script>`} {
		if !strings.Contains(page, want) {
			t.Fatalf("the jobs page lacks %q:\n%s", want, page)
		}
	}

	// The bulk cancel of t1's red jobs: confirmation, refusals, then the action.
	filter := "tenant=t1&tags=red"
	page = get("/monitoring/jobs/bulk?op=cancel&" + filter)
	if !strings.Contains(page, `<strong id="bulk-eligible">2</strong>`) || b.job(t, red).Status != "queued" {
		t.Fatalf("confirmation page:\n%s", page)
	}
	form := "/monitoring/jobs/bulk?op=cancel&" + filter
	postForm := func(body string, header ...string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, b.base+form, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var sb strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			sb.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return resp.StatusCode, sb.String()
	}
	if code, _ := postForm(""); code != http.StatusBadRequest || b.job(t, red).Status != "queued" {
		t.Fatalf("a POST without the confirmation: %d", code)
	}
	if code, _ := postForm("confirm=yes", "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"); code != http.StatusForbidden || b.job(t, red).Status != "queued" {
		t.Fatalf("a cross-origin bulk cancel: %d", code)
	}
	code, out := postForm("confirm=yes")
	if code != http.StatusOK || !strings.Contains(out, `<strong id="bulk-acted">2</strong>`) || !strings.Contains(out, `<strong id="bulk-skipped">0</strong>`) {
		t.Fatalf("bulk cancel: %d\n%s", code, out)
	}
	for _, id := range []string{red, both} {
		if st := b.job(t, id).Status; st != "cancelled" {
			t.Fatalf("%s after the bulk cancel: %s", id, st)
		}
	}
	if st := b.job(t, blue).Status; st != "queued" {
		t.Fatalf("an unselected job after the bulk cancel: %s", st)
	}
	// Again: both ended, nothing to act on.
	if code, out = postForm("confirm=yes"); code != http.StatusOK || !strings.Contains(out, `<strong id="bulk-acted">0</strong>`) || !strings.Contains(out, `<strong id="bulk-skipped">2</strong>`) {
		t.Fatalf("a second bulk cancel: %d\n%s", code, out)
	}

	// Progress: none on a job that never reported any, 40% on one that did.
	if page = get("/monitoring/jobs/" + done); strings.Contains(page, `id="progress"`) || strings.Contains(page, "Progress") {
		t.Fatalf("a done job without progress shows progress:\n%s", page)
	}
	block := b.submitTagged(t, "t1", "block-progress", 0)
	b.waitStatus(t, block, "processing")
	var jp string
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(jp, `<p id="progress">`) && time.Now().Before(deadline) {
		jp = get("/monitoring/jobs/" + block)
	}
	if !strings.Contains(jp, `value="40"></progress> 40% · halfway`) {
		t.Fatalf("a job that reported progress:\n%s", jp)
	}
	if code, _ := b.do(t, http.MethodPost, "/monitoring/jobs/"+block+"/cancel", ""); code != http.StatusSeeOther {
		t.Fatalf("cancel the blocking job: %d", code)
	}

	// asynqmon's page links to jobguard's.
	if page = get("/monitoring/"); !strings.Contains(page, `id="jobguard-banner"`) || !strings.Contains(page, `href="/monitoring/jobs"`) || !strings.Contains(page, `href="/monitoring/schedules"`) ||
		!strings.Contains(page, `href="/monitoring/workflows"`) {
		t.Fatalf("asynqmon's page has no banner:\n%.3000s", page)
	}
}

// A read-only UI offers no bulk action and refuses one.
func TestBulkIsOffInReadOnly(t *testing.T) {
	t.Parallel()
	b := startAppAs(t, "api", map[string]string{"MONITORING_USER": "admin", "MONITORING_PASSWORD": "pw", "MONITORING_READONLY": "true"})
	auth := []string{"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte("admin:pw"))}
	code, page := b.do(t, http.MethodGet, "/monitoring/jobs", "", auth...)
	if code != http.StatusOK || strings.Contains(page, "bulk-cancel") {
		t.Fatalf("read-only jobs page: %d\n%s", code, page)
	}
	if code, _ := b.do(t, http.MethodGet, "/monitoring/jobs/bulk?op=cancel", "", auth...); code != http.StatusMethodNotAllowed {
		t.Fatalf("read-only bulk confirmation: %d", code)
	}
	if code, _ := b.do(t, http.MethodPost, "/monitoring/jobs/bulk?op=cancel", "", auth...); code != http.StatusMethodNotAllowed {
		t.Fatalf("read-only bulk cancel: %d", code)
	}
}

// In a browser: the jobs page refreshes itself (a job enqueued after it loaded appears, and the
// counts move, without a navigation), its bulk cancel goes through the confirmation page and says
// how many jobs it cancelled, and asynqmon's page carries a banner whose link opens the jobs page.
func TestBrowserJobsPageLiveCountsAndBulk(t *testing.T) {
	t.Parallel()
	ctx := testsupport.Browser(t)
	b := startApp(t, nil)
	first := b.submitTagged(t, "t1", "live-1", time.Hour, "live")
	poll := func(what, expr string) string { t.Helper(); return pollPage(t, ctx, 30*time.Second, what, expr) }
	queued := `(() => { const c = document.querySelector('#counts td[data-status="queued"] a'); return c ? c.textContent : ""; })()`
	if err := chromedp.Do(ctx, chromedp.Navigate(b.base+"/monitoring/jobs?tenant=t1&tags=live&refresh=1")); err != nil {
		t.Fatal(err)
	}
	if got := poll("the first job is listed", `(() => { const a = document.querySelector("#jobs a"); return a ? a.textContent : ""; })()`); got != first {
		t.Fatalf("listed %q, want %q", got, first)
	}
	if got := poll("the counts", queued); got != "1" {
		t.Fatalf("queued count %q, want 1", got)
	}
	// A mark on the window survives only if the page is not reloaded.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.jobguardMark = true`)); err != nil {
		t.Fatal(err)
	}
	second := b.submitTagged(t, "t1", "live-2", time.Hour, "live")
	poll("the live refresh lists the new job", `[...document.querySelectorAll("#jobs a")].some(a => a.textContent === "`+second+`") && window.jobguardMark === true ? "yes" : ""`)
	poll("the live refresh moves the counts", `(`+queued+`) === "2" ? "yes" : ""`)
	if state := poll("the refresh says when", `document.querySelector("#live-state").textContent`); !strings.HasPrefix(state, "updated ") && state != "live" {
		t.Fatalf("live state %q", state)
	}

	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#bulk-cancel"))); err != nil {
		t.Fatal(err)
	}
	if got := poll("the confirmation page", `(() => { const e = document.querySelector("#bulk-eligible"); return e ? e.textContent : ""; })()`); got != "2" {
		t.Fatalf("eligible %q, want 2", got)
	}
	if st := b.job(t, first).Status; st != "queued" {
		t.Fatalf("the confirmation page cancelled a job: %s", st)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#bulk-confirm"))); err != nil {
		t.Fatal(err)
	}
	if got := poll("the bulk cancel's answer", `(() => { const e = document.querySelector("#bulk-acted"); return e ? e.textContent : ""; })()`); got != "2" {
		t.Fatalf("acted on %q, want 2", got)
	}
	for _, id := range []string{first, second} {
		if st := b.job(t, id).Status; st != "cancelled" {
			t.Fatalf("%s after the bulk cancel: %s", id, st)
		}
	}

	if err := chromedp.Do(ctx, chromedp.Navigate(b.base+"/monitoring/")); err != nil {
		t.Fatal(err)
	}
	poll("asynqmon renders", `document.querySelector("#root") && document.querySelector("#root").children.length > 0 ? "yes" : ""`)
	poll("the banner", `(() => { const a = document.querySelector("#jobguard-banner a[href='/monitoring/jobs']"); return a ? a.textContent : ""; })()`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#jobguard-banner a[href='/monitoring/jobs']"))); err != nil {
		t.Fatal(err)
	}
	poll("the banner's link opens the jobs page", `location.pathname === "/monitoring/jobs" && document.querySelector("#counts") ? "yes" : ""`)
}
