package httpapi

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/history"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/freetext"
)

// listView is GET /jobs: a page of the caller's tenant's jobs (an open API's: of tenant=, else of
// every tenant), newest first.
type listView struct {
	Jobs []listedJob `json:"jobs"`
	// NextCursor continues the list; omitted after the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

type listedJob struct {
	JobID      string     `json:"job_id" openapi:"ref=JobID"`
	Tenant     string     `json:"tenant"`
	Type       string     `json:"type"`
	Queue      string     `json:"queue"`
	Status     string     `json:"status" openapi:"ref=JobStatus"`
	Attempt    int        `json:"attempt" openapi:"min=0"`
	CreatedAt  *time.Time `json:"created_at,omitempty"`
	UpdatedAt  *time.Time `json:"updated_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	Tags       []string   `json:"tags,omitempty" openapi:"ref=Tags"`
}

// list is GET /jobs?status=&type=&tag=&tags_match=&error=&created_after=&created_before=&cursor=&limit=
// (and tenant=, optional when the API is open).
func (a *api) list(c *fiber.Ctx) error {
	tenant := tenantOf(c)
	if asked := c.Query("tenant"); tenant == "" {
		// An open API (no API_TOKENS) has no tenants to keep apart, as its operator routes are
		// open too: without tenant= it lists every tenant's jobs (jobguard jobs list on the
		// quickstart instance).
		tenant = strings.Clone(asked)
	} else if asked != "" && asked != tenant {
		return &problem.HTTPError{Status: http.StatusForbidden, Field: "tenant", Detail: "tenant is not the tenant of this token"}
	}
	for _, name := range []string{"tenant", "type"} {
		if err := searchText(c, name); err != nil {
			return err
		}
	}
	q := engine.ListQuery{Tenant: tenant, Type: strings.Clone(c.Query("type")), Cursor: strings.Clone(c.Query("cursor")), Limit: 50}
	if st := c.Query("status"); st != "" {
		if !slices.Contains(jobstore.Statuses, jobstore.Status(st)) {
			return &problem.HTTPError{Status: http.StatusBadRequest, Field: "status", Detail: "status must be one of " + statusList()}
		}
		q.Status = jobstore.Status(strings.Clone(st))
	}
	if err := searchOf(c, &q); err != nil {
		return err
	}
	if l := c.Query("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 200 {
			return &problem.HTTPError{Status: http.StatusBadRequest, Field: "limit", Detail: "limit must be an integer from 1 to 200"}
		}
		q.Limit = n
	}
	p, err := listPage(c.UserContext(), a.sql, a.stack, q)
	if errors.Is(err, engine.ErrBadCursor) {
		return &problem.HTTPError{Status: http.StatusBadRequest, Field: "cursor", Detail: "cursor is not one a list answered"}
	}
	if err != nil {
		return err
	}
	out := listView{Jobs: make([]listedJob, 0, len(p.Jobs)), NextCursor: p.Next}
	for _, j := range p.Jobs {
		out.Jobs = append(out.Jobs, listedJob{JobID: j.JobID, Tenant: j.Tenant, Type: j.Type, Queue: j.Queue, Status: string(j.Status),
			Attempt: j.Attempt, CreatedAt: stamp(j.CreatedAt), UpdatedAt: stamp(j.UpdatedAt), FinishedAt: stamp(j.FinishedAt), Tags: j.Tags})
	}
	return c.JSON(out)
}

// listPage reads stack's Redis index, and with a database (DATABASE_URL) continues past its end
// into the SQL history, so a job Redis let go is still listed (GET /jobs, jobguard jobs list).
func listPage(ctx context.Context, db *pgxpool.Pool, stack *engine.Stack, q engine.ListQuery) (engine.Page, error) {
	if db == nil {
		return stack.List(ctx, q)
	}
	return history.List(ctx, db, stack, q)
}

// searchText refuses a text parameter of GET /jobs that is not printable UTF-8 (freetext.Check):
// PostgreSQL refuses a NUL or bytes that are not UTF-8 (the SQL history's search answered 500),
// and no stored type, tenant or error text holds one (errors are stored escaped).
func searchText(c *fiber.Ctx, name string) error {
	if err := freetext.Check(c.Query(name)); err != nil {
		return problem.BadField(name, name+" must be printable UTF-8 text ("+strings.TrimPrefix(err.Error(), "freetext: ")+")")
	}
	return nil
}

// maxErrorQuery bounds the error filter's text.
const maxErrorQuery = 200

// searchOf reads GET /jobs's search parameters into q: tag (repeated, at most 8), tags_match
// (any, the default, or all), error (a case-insensitive substring of last_error), created_after
// and created_before (RFC 3339). Each string is copied: q outlives fasthttp's buffers.
func searchOf(c *fiber.Ctx, q *engine.ListQuery) error {
	var tags []string
	for _, v := range c.Context().QueryArgs().PeekMulti("tag") {
		tags = append(tags, string(v))
	}
	norm, err := engine.NormalizeTags(tags)
	if err != nil {
		return problem.BadField("tag", "tag must be given at most 8 times, each 1-64 characters of A-Z a-z 0-9 . _ : = - ("+tagsProblem(err)+")")
	}
	q.Tags = norm
	switch m := c.Query("tags_match"); m {
	case "", jobstore.TagsAny, jobstore.TagsAll:
		q.TagsMatch = strings.Clone(m)
	default:
		return problem.BadField("tags_match", "tags_match must be any or all")
	}
	if err := searchText(c, "error"); err != nil {
		return err
	}
	e := c.Query("error")
	if len(e) > maxErrorQuery {
		return problem.BadField("error", "error must be at most 200 characters")
	}
	q.Error = strings.Clone(e)
	for _, w := range []struct {
		name string
		to   *time.Time
	}{{"created_after", &q.CreatedAfter}, {"created_before", &q.CreatedBefore}} {
		if v := c.Query(w.name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return problem.BadField(w.name, w.name+" must be an RFC 3339 time, e.g. 2026-12-03T10:00:00Z")
			}
			*w.to = t
		}
	}
	return nil
}

// statusList names the job statuses, for the answer to a status= no job can have.
func statusList() string {
	names := make([]string, len(jobstore.Statuses))
	for i, s := range jobstore.Statuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}
