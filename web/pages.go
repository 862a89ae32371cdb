package web

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"html/template"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/hibiken/asynq"
)

// jobguard's own monitoring pages, beside asynqmon and behind the same credentials and origin
// check: {root}/jobs (search by id; a tenant's jobs by status, type, tags, error text and creation
// window, with counts per status and type, live refresh and bulk cancel and retry: search.go,
// bulk.go), {root}/jobs/{id} (record, live lease, progress, deliveries, timeline, cancel and
// retry), {root}/workflows and {root}/workflows/{id} (the DAG, live, cancel: workflow_pages.go),
// {root}/logical-queues (a sharded queue's shards summed: queues.go) and {root}/schedules (pause
// and resume). Rendered on the server with html/template; the one script (static/jobs.js) is the
// live refresh and the confirmation before a cancel, and the pages work without it.

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static/jobs.js
var jobsScript []byte

var pageTemplates = template.Must(template.New("").Funcs(template.FuncMap{
	"stamp":    stampText,
	"duration": func(d time.Duration) string { return d.Round(time.Millisecond).String() },
	"join":     strings.Join,
	"statusClass": func(s string) string {
		if knownStatus(s) {
			return "st-" + s
		}
		return "st-unknown"
	},
}).ParseFS(templateFiles, "templates/*.html"))

// ErrReadOnly answers a cancel or retry sent to a read-only UI.
var ErrReadOnly = &fiber.Error{Code: fiber.StatusMethodNotAllowed, Message: "the monitoring UI is read-only (MONITORING_READONLY)"}

// The methods of the pages, for Allow (RFC 9110 section 15.5.6: every 405 carries one). The pages
// are served inside the UI's mount, so the app's own 405 fallback never sees their paths.
const (
	allowRead   = "GET, HEAD"
	allowChange = "POST"
)

// methodNotAllowed answers a page asked with a method it does not take: 405 naming those it does.
func methodNotAllowed(c *fiber.Ctx, allow string) error {
	c.Set(fiber.HeaderAllow, allow)
	return fiber.ErrMethodNotAllowed
}

// readOnly answers a change page of a read-only UI: it takes no method now, so Allow is empty.
func readOnly(c *fiber.Ctx) error {
	c.Set(fiber.HeaderAllow, "")
	return ErrReadOnly
}

// maxPageRows bounds a list page.
const maxPageRows = 200

// maxShownDeliveries is how many of a job's latest deliveries its page looks up in asynq.
const maxShownDeliveries = 10

// pages serves the jobs and schedules pages.
type pages struct {
	jobs     Jobs
	insp     *asynq.Inspector
	root     string
	readOnly bool
	timeout  time.Duration
}

// serve answers c when its path is one of the pages'; handled is false otherwise.
func (p *pages) serve(c *fiber.Ctx) (handled bool, err error) {
	path := c.Path()
	switch {
	case path == p.root+"/schedules":
		return true, p.get(c, p.schedules)
	case path == p.root+"/logical-queues":
		return true, p.get(c, p.logicalQueues)
	case strings.HasPrefix(path, p.root+"/schedules/"):
		return true, p.pauseSchedule(c, strings.TrimPrefix(path, p.root+"/schedules/"))
	case path == p.root+"/jobs" || path == p.root+"/jobs/":
		return true, p.get(c, p.list)
	case path == p.root+"/jobs/bulk":
		return true, p.bulk(c)
	case path == p.root+"/jobs.js":
		c.Set(fiber.HeaderContentType, "text/javascript; charset=utf-8")
		c.Set(fiber.HeaderCacheControl, "no-cache")
		return true, c.Send(jobsScript)
	}
	if handled, err := p.serveWorkflows(c, path); handled {
		return true, err
	}
	id, op, under, err := pathID(path, p.root+"/jobs/")
	if !under || err != nil {
		return under, err
	}
	switch op {
	case "":
		return true, p.get(c, func(ctx context.Context, c *fiber.Ctx) error { return p.job(ctx, c, id) })
	case "cancel", "retry":
		return true, p.change(c, id, op)
	}
	return true, fiber.ErrNotFound
}

// get runs a page's handler for GET and HEAD, with the UI's timeout.
func (p *pages) get(c *fiber.Ctx, h func(context.Context, *fiber.Ctx) error) error {
	if c.Method() != fiber.MethodGet && c.Method() != fiber.MethodHead {
		return methodNotAllowed(c, allowRead)
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), p.timeout)
	defer cancel()
	return h(ctx, c)
}

// post runs a change for POST only, with the UI's timeout, when the UI is not read-only; done,
// the browser is sent to back (303), and an error is the app's problem answer.
func (p *pages) post(c *fiber.Ctx, back string, do func(context.Context) error) error {
	if p.readOnly {
		return readOnly(c)
	}
	if c.Method() != fiber.MethodPost {
		return methodNotAllowed(c, allowChange)
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), p.timeout)
	defer cancel()
	if err := do(ctx); err != nil {
		return err
	}
	return c.Redirect(back, fiber.StatusSeeOther)
}

// change is POST {root}/jobs/{id}/cancel|retry: done, the browser is sent back to the job's page
// (303); an error is the app's problem answer (404, 409).
func (p *pages) change(c *fiber.Ctx, id, op string) error {
	return p.post(c, p.root+"/jobs/"+url.PathEscape(id), func(ctx context.Context) error {
		if op == "cancel" {
			return p.jobs.Cancel(ctx, id, "monitoring UI", "cancel pressed on the jobs page")
		}
		return p.jobs.Replay(ctx, id)
	})
}

// pauseSchedule is POST {root}/schedules/{name}/pause|resume: done, the browser is sent back to
// the schedules page (303); an unknown schedule is the app's 404.
func (p *pages) pauseSchedule(c *fiber.Ctx, rest string) error {
	name, op, _ := strings.Cut(rest, "/")
	name, err := url.PathUnescape(name)
	if err != nil || name == "" || (op != "pause" && op != "resume") {
		return fiber.ErrNotFound
	}
	return p.post(c, p.root+"/schedules", func(ctx context.Context) error {
		return p.jobs.PauseSchedule(ctx, name, op == "pause")
	})
}

// list is {root}/jobs: ?id= goes to that job's page; otherwise a page of the jobs of ?tenant= (of
// every tenant without it) that match the search (search.go), with the counts per status and
// type of its tenant and window; ?refresh= sets the live refresh's interval (seconds, default 5).
func (p *pages) list(ctx context.Context, c *fiber.Ctx) error {
	if id := strings.TrimSpace(c.Query("id")); id != "" {
		return c.Redirect(p.root+"/jobs/"+url.PathEscape(id), fiber.StatusSeeOther)
	}
	s, err := searchOf(c, time.Now())
	if err != nil {
		return err
	}
	page, err := p.jobs.List(ctx, s.Q)
	if err != nil {
		return err
	}
	cnt, err := countJobs(ctx, p.jobs, p.root, s)
	if err != nil {
		return err
	}
	fair, err := p.jobs.Fairness(ctx)
	if err != nil {
		return err
	}
	refresh := 5
	if n, err := strconv.Atoi(c.Query("refresh")); err == nil && n >= 1 && n <= 300 {
		refresh = n
	}
	data := map[string]any{"Root": p.root, "Search": s, "Query": s.Q, "Page": page, "Counts": cnt, "Fair": fair, "Refresh": refresh,
		"Since": sinceChoices, "Statuses": allStatuses, "ReadOnly": p.readOnly,
		"BulkCancel": p.root + "/jobs/bulk?" + s.with("op", "cancel"), "BulkRetry": p.root + "/jobs/bulk?" + s.with("op", "retry")}
	if page.Next != "" {
		data["Next"] = p.root + "/jobs?" + s.with("cursor", page.Next, "limit", strconv.Itoa(s.Q.Limit))
	}
	return renderCSP(c, fiber.StatusOK, "jobs.html", data, jobsCSP)
}

// deliveryRow is one delivery on a job's page: its state in asynq ("" when asynq no longer has it).
type deliveryRow struct {
	ID, State, Link string
	Current         bool
}

// job is {root}/jobs/{id}.
func (p *pages) job(ctx context.Context, c *fiber.Ctx, id string) error {
	j, err := p.jobs.Job(ctx, id)
	if ok, err := p.found(c, err, j != nil, "nojob.html", id); !ok {
		return err
	}
	var rows []deliveryRow
	from := max(0, len(j.Deliveries)-maxShownDeliveries)
	for _, d := range j.Deliveries[from:] {
		row := deliveryRow{ID: d, Current: d == j.Delivery,
			Link: p.root + "/queues/" + url.PathEscape(j.Queue) + "/tasks/" + url.PathEscape(d)}
		if info, err := p.insp.GetTaskInfo(j.Queue, d); err == nil {
			row.State = info.State.String()
		}
		rows = append(rows, row)
	}
	fields := make([]string, 0, len(j.Record))
	for k := range j.Record {
		fields = append(fields, k)
	}
	sort.Strings(fields)
	return render(c, fiber.StatusOK, "job.html", map[string]any{
		"Root": p.root, "Job": j, "Deliveries": rows, "Fields": fields, "Tags": strings.Join(j.Tags, ", "),
		"CanCancel": !p.readOnly && !j.Ended, "CanRetry": !p.readOnly && j.Failed, "ReadOnly": p.readOnly,
	})
}

// schedules is {root}/schedules.
func (p *pages) schedules(ctx context.Context, c *fiber.Ctx) error {
	s, err := p.jobs.Schedules(ctx)
	if err != nil {
		return err
	}
	return render(c, fiber.StatusOK, "schedules.html", map[string]any{"Root": p.root, "Schedules": s, "ReadOnly": p.readOnly})
}

// pageCSP lets a page load nothing (the job and schedules pages have no script) and post forms only
// to the UI itself.
const pageCSP = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// jobsCSP is pageCSP plus the jobs page's own script and its reads of the page itself.
const jobsCSP = pageCSP + "; script-src 'self'; connect-src 'self'"

func render(c *fiber.Ctx, status int, name string, data any) error {
	return renderCSP(c, status, name, data, pageCSP)
}

func renderCSP(c *fiber.Ctx, status int, name string, data any, csp string) error {
	var buf bytes.Buffer
	if err := pageTemplates.ExecuteTemplate(&buf, name, data); err != nil {
		return errors.Join(errors.New("web: render "+name), err)
	}
	c.Set(fiber.HeaderContentType, fiber.MIMETextHTMLCharsetUTF8)
	c.Set(fiber.HeaderContentSecurityPolicy, csp)
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.Status(status).Send(buf.Bytes())
}

// stampText shows a time in UTC to the millisecond; "" when it is not set.
func stampText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

// found is whether a page's subject (a job, a workflow) was loaded; when it was not, the error is
// the load's, or, for one that is not there, that of rendering the 404 page tmpl naming id.
func (p *pages) found(c *fiber.Ctx, err error, exists bool, tmpl, id string) (bool, error) {
	if err != nil {
		return false, err
	}
	if !exists {
		return false, render(c, fiber.StatusNotFound, tmpl, map[string]any{"Root": p.root, "ID": id})
	}
	return true, nil
}

// pathID reads a path "{prefix}{id}[/{op}]": the id unescaped and copied (a page's closure keeps
// it past fasthttp's buffers), and op. under is false for a path not under prefix; err is a 404
// for an empty or badly escaped id.
func pathID(path, prefix string) (id, op string, under bool, err error) {
	rest, ok := strings.CutPrefix(path, prefix)
	if !ok {
		return "", "", false, nil
	}
	id, op, _ = strings.Cut(rest, "/")
	id, err = url.PathUnescape(id)
	if err != nil || id == "" {
		return "", "", true, fiber.ErrNotFound
	}
	return strings.Clone(id), op, true, nil
}
