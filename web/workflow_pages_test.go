package web_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/jobguard/jobguard/app"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// probeNode is a workflow node of the probe type (a name block-* runs until cancelled).
func probeNode(id, name string, parents ...string) map[string]any {
	if parents == nil {
		parents = []string{}
	}
	return map[string]any{"id": id, "type": probeType, "payload": map[string]string{"tenant_id": "t1", "name": name}, "parents": parents}
}

// createWorkflow posts a workflow of nodes for tenant t1 and returns its id and its nodes' job ids.
func (b *bundle) createWorkflow(t *testing.T, nodes ...map[string]any) (string, map[string]string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"tenant_id": "t1", "nodes": nodes})
	code, out := b.do(t, http.MethodPost, "/workflows", string(body))
	var a struct {
		WorkflowID string            `json:"workflow_id"`
		Nodes      map[string]string `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &a); err != nil || code != http.StatusAccepted {
		t.Fatalf("create workflow: %d %.500s", code, out)
	}
	return a.WorkflowID, a.Nodes
}

// workflowStatus is the workflow's status as GET /workflows/{id} says.
func (b *bundle) workflowStatus(t *testing.T, id string) string {
	t.Helper()
	code, out := b.do(t, http.MethodGet, "/workflows/"+id, "")
	var v struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != http.StatusOK {
		t.Fatalf("GET /workflows/%s: %d %s", id, code, out)
	}
	return v.Status
}

var nodeRe = regexp.MustCompile(`<a href="([^"]+)" class="node" data-node="([^"]+)" data-status="([^"]*)">`)

// pageNodes are the nodes drawn on a workflow's page: node id -> status, and node id -> link.
func pageNodes(page string) (status, link map[string]string) {
	status, link = map[string]string{}, map[string]string{}
	for _, m := range nodeRe.FindAllStringSubmatch(page, -1) {
		link[m[2]], status[m[2]] = m[1], m[3]
	}
	return status, link
}

// The workflow page over HTTP: the DAG with each node's status and a link to its job's page, the
// counts and the cancel button while it runs; the jobs page, a node's job page and the workflows
// list link to it; cancel asks first (GET and a POST without confirm=yes answer the confirmation
// page), a cross-origin POST is refused, the confirmed POST cancels and sends the browser back,
// a second is 409; an unknown workflow is 404.
func TestWorkflowPage(t *testing.T) {
	t.Parallel()
	b := startApp(t, nil)
	id, jobs := b.createWorkflow(t, probeNode("a", "block-wf-a"), probeNode("b", "wf-b", "a"), probeNode("c", "wf-c", "a"),
		probeNode("d", "wf-d", "b", "c"))
	b.waitStatus(t, jobs["a"], "processing")
	path := "/monitoring/workflows/" + id
	code, page := b.do(t, http.MethodGet, path, "")
	status, link := pageNodes(page)
	want := map[string]string{"a": "processing", "b": "held", "c": "held", "d": "held"}
	if code != http.StatusOK || fmt.Sprint(status) != fmt.Sprint(want) {
		t.Fatalf("workflow page: %d, nodes %v\n%.3000s", code, status, page)
	}
	for n, j := range jobs {
		if link[n] != "/monitoring/jobs/"+j {
			t.Fatalf("node %s links to %q, want its job %s", n, link[n], j)
		}
	}
	if strings.Count(page, "<path d=") != 4 || !strings.Contains(page, `id="wf-status">running<`) ||
		!strings.Contains(page, `id="wf-cancel"`) || !strings.Contains(page, `data-ended="no"`) ||
		!strings.Contains(page, `<td class="count" data-status="held">3</td>`) {
		t.Fatalf("workflow page lacks its edges, status, counts or cancel button:\n%s", page)
	}

	// Linked from the jobs page, from a node's job page and from the workflows list.
	wfLink := `href="/monitoring/workflows/` + id + `"`
	if _, p := b.do(t, http.MethodGet, "/monitoring/jobs?tenant=t1", ""); !strings.Contains(p, wfLink) {
		t.Fatalf("the jobs page does not link to the workflow:\n%s", p)
	}
	if _, p := b.do(t, http.MethodGet, "/monitoring/jobs/"+jobs["b"], ""); !strings.Contains(p, `<p id="workflow">Part of workflow <a `+wfLink+`>`+id+`</a>, node <code>b</code>`) {
		t.Fatalf("a node's job page does not name its workflow and node:\n%s", p)
	}
	if _, p := b.do(t, http.MethodGet, "/monitoring/workflows?tenant=t1", ""); !strings.Contains(p, wfLink) {
		t.Fatalf("the workflows list lacks the running workflow:\n%s", p)
	}
	if _, p := b.do(t, http.MethodGet, "/monitoring/workflows?tenant=t2", ""); strings.Contains(p, wfLink) {
		t.Fatal("t2's list shows t1's workflow")
	}
	if code, _ := b.do(t, http.MethodGet, "/monitoring/workflows?id="+id, ""); code != http.StatusSeeOther {
		t.Fatalf("open by id: %d", code)
	}

	// Cancel: the confirmation first, whichever way it is asked.
	form := []string{"Content-Type", "application/x-www-form-urlencoded"}
	if code, p := b.do(t, http.MethodGet, path+"/cancel", ""); code != http.StatusOK || !strings.Contains(p, `id="cancel-confirm"`) ||
		!strings.Contains(p, `<strong id="cancel-open">4</strong>`) {
		t.Fatalf("confirmation page: %d\n%s", code, p)
	}
	if code, p := b.do(t, http.MethodPost, path+"/cancel", "", form...); code != http.StatusOK || !strings.Contains(p, `id="cancel-confirm"`) {
		t.Fatalf("a POST without confirm=yes: %d\n%s", code, p)
	}
	if code, _ := b.do(t, http.MethodPost, path+"/cancel", "confirm=yes", append(form, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example")...); code != http.StatusForbidden {
		t.Fatalf("cross-origin cancel: %d", code)
	}
	if st := b.workflowStatus(t, id); st != "running" {
		t.Fatalf("the workflow is %s before the confirmed cancel", st)
	}
	if code, out := b.do(t, http.MethodPost, path+"/cancel", "confirm=yes", form...); code != http.StatusSeeOther {
		t.Fatalf("confirmed cancel: %d %s", code, out)
	}
	testsupport.Eventually(t, 20*time.Second, "the workflow is cancelled", func() bool { return b.workflowStatus(t, id) == "cancelled" })
	if code, out := b.do(t, http.MethodPost, path+"/cancel", "confirm=yes", form...); code != http.StatusConflict || !strings.Contains(out, "workflow_ended") {
		t.Fatalf("second cancel: %d %s", code, out)
	}
	_, page = b.do(t, http.MethodGet, path, "")
	status, _ = pageNodes(page)
	if strings.Contains(page, `id="wf-cancel"`) || !strings.Contains(page, `data-ended="yes"`) || status["a"] != "cancelled" || status["d"] != "cancelled" {
		t.Fatalf("the cancelled workflow's page: nodes %v\n%s", status, page)
	}
	if _, p := b.do(t, http.MethodGet, "/monitoring/workflows", ""); strings.Contains(p, wfLink) {
		t.Fatal("the list of running workflows shows an ended one")
	}
	if code, _ := b.do(t, http.MethodGet, "/monitoring/workflows/wf-0123456789abcdef0123456789ab", ""); code != http.StatusNotFound {
		t.Fatalf("unknown workflow: %d", code)
	}
	if code, _ := b.do(t, http.MethodGet, "/monitoring/workflows/"+url.PathEscape("<x>"), ""); code != http.StatusNotFound {
		t.Fatalf("malformed workflow id: %d", code)
	}
}

// A read-only UI shows the workflow without a cancel button and refuses the cancel (405).
func TestWorkflowPageReadOnly(t *testing.T) {
	t.Parallel()
	b := startAppAs(t, app.RoleAPI, map[string]string{"MONITORING_READONLY": "true"})
	id, _ := b.createWorkflow(t, probeNode("a", "ro-a"), probeNode("b", "ro-b", "a"))
	code, page := b.do(t, http.MethodGet, "/monitoring/workflows/"+id, "")
	if code != http.StatusOK || strings.Contains(page, `id="wf-cancel"`) || !strings.Contains(page, "Read-only") {
		t.Fatalf("read-only page: %d\n%s", code, page)
	}
	if code, _ := b.do(t, http.MethodPost, "/monitoring/workflows/"+id+"/cancel", "confirm=yes", "Content-Type", "application/x-www-form-urlencoded"); code != http.StatusMethodNotAllowed {
		t.Fatalf("read-only cancel: %d", code)
	}
	if st := b.workflowStatus(t, id); st != "running" {
		t.Fatalf("read-only cancel changed the workflow: %s", st)
	}
}

// A workflow of 1,000 nodes (the most there may be) is drawn whole: every node and edge, in a page
// of bounded size. Its size and the time to answer it are logged (not asserted).
func TestWorkflowPageThousandNodes(t *testing.T) {
	t.Parallel()
	// The page is what is tested: the create of 1,000 nodes gets the longest request deadline, as a
	// loaded machine (a CI run beside other builds) once took 16 s over it.
	b := startAppAs(t, app.RoleAPI, map[string]string{"BODY_LIMIT": "1048576", "REQUEST_TIMEOUT": "1m"})
	nodes := make([]map[string]any, 1000)
	edges := 0
	for i := range nodes {
		var parents []string
		if i%50 != 0 {
			parents = append(parents, fmt.Sprintf("n%03d", i-1))
		}
		if i >= 50 {
			parents = append(parents, fmt.Sprintf("n%03d", i-50))
		}
		edges += len(parents)
		nodes[i] = probeNode(fmt.Sprintf("n%03d", i), fmt.Sprintf("big-%d", i), parents...)
	}
	id, _ := b.createWorkflow(t, nodes...)
	start := time.Now()
	code, page := b.do(t, http.MethodGet, "/monitoring/workflows/"+id, "")
	took := time.Since(start)
	status, _ := pageNodes(page)
	if code != http.StatusOK || len(status) != 1000 || status["n000"] != "queued" || status["n999"] != "held" || strings.Count(page, "<path d=") != edges {
		t.Fatalf("1,000-node page: %d, %d nodes drawn, %d edges of %d", code, len(status), strings.Count(page, "<path d="), edges)
	}
	if len(page) > 1<<20 {
		t.Fatalf("the 1,000-node page is %d bytes", len(page))
	}
	t.Logf("1,000 nodes, %d edges: page %d bytes, answered in %s", edges, len(page), took)
}

// In a browser: the jobs page links a node's job to its workflow; the workflow's page draws its
// nodes and refreshes itself until the workflow ends (cancelled here through the API), then stops;
// on a second workflow, Cancel asks for confirmation (accepted) and the page shows it cancelled.
func TestBrowserWorkflowPage(t *testing.T) {
	t.Parallel()
	ctx := testsupport.Browser(t)
	b := startApp(t, nil)
	poll := func(what, expr string) string {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
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
	first, _ := b.createWorkflow(t, probeNode("a", "block-br-a"), probeNode("b", "br-b", "a"), probeNode("c", "br-c", "a", "b"))
	if err := chromedp.Do(ctx, chromedp.Navigate(b.base+"/monitoring/jobs?tenant=t1&refresh=1")); err != nil {
		t.Fatal(err)
	}
	poll("a node's row links to its workflow", `document.querySelector("#jobs a.wf") ? "yes" : ""`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#jobs a.wf"))); err != nil {
		t.Fatal(err)
	}
	drawn := poll("the DAG is drawn", `(() => { const n = document.querySelectorAll("#dag a.node"); return n.length === 3 && document.querySelectorAll("#dag path").length === 3 ? "yes" : ""; })()`)
	if drawn != "yes" {
		t.Fatal(drawn)
	}
	// Live refresh: the page sees the cancel made elsewhere, then stops refreshing.
	if err := chromedp.Do(ctx, chromedp.Navigate(b.base+"/monitoring/workflows/"+first+"?refresh=1")); err != nil {
		t.Fatal(err)
	}
	poll("the page is live", `document.querySelector("#live-state") ? "yes" : ""`)
	if code, out := b.do(t, http.MethodPost, "/workflows/"+first+"/cancel", ""); code != http.StatusOK {
		t.Fatalf("cancel through the API: %d %s", code, out)
	}
	poll("the live page shows the workflow cancelled and stops", `(() => { const s = document.querySelector("#wf-status"); const st = document.querySelector("#live-state");
		return s && s.textContent === "cancelled" && st.textContent.startsWith("ended") && !document.querySelector("#wf-cancel") ? "yes" : ""; })()`)

	second, _ := b.createWorkflow(t, probeNode("a", "block-br2-a"), probeNode("b", "br2-b", "a"))
	if err := chromedp.Do(ctx, chromedp.Navigate(b.base+"/monitoring/workflows/"+second)); err != nil {
		t.Fatal(err)
	}
	poll("the cancel button is shown", `document.querySelector("#wf-cancel") ? "yes" : ""`)
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	asked := make(chan string, 1)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			asked <- ev.Message
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
			return
		}
	}()
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#wf-cancel"))); err != nil {
		t.Fatal(err)
	}
	select {
	case q := <-asked:
		if !strings.Contains(q, second) {
			t.Fatalf("the confirmation asked %q", q)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no confirmation was asked")
	}
	poll("the page shows the workflow cancelled", `(() => { const s = document.querySelector("#wf-status"); return s && s.textContent === "cancelled" ? "yes" : ""; })()`)
	if st := b.workflowStatus(t, second); st != "cancelled" {
		t.Fatalf("after the button the workflow is %s", st)
	}
}
