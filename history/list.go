package history

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

var (
	//go:embed list_schema.sql
	listSchemaSQL string
	//go:embed search_schema.sql
	searchSchemaSQL string
)

// ListSchema is the DDL of the history's list order (a created_at column and its index), a
// migration step after Schema's.
func ListSchema() string { return listSchemaSQL }

// SearchSchema is the DDL of the history's tags (a tags column, backfilled, and its GIN index), a
// migration step after ListSchema's.
func SearchSchema() string { return searchSchemaSQL }

// sqlCursor prefixes a cursor that continues in SQL; the rest is a store cursor (base64url, which
// has no '.'), so the two never mix up.
const sqlCursor = "sql."

// List reads a page of a tenant's jobs, newest first: the Redis index (Stack.List) while it has
// entries, then the copies of jobs older than the index's last entry, in the same order (created
// ms, then job id, descending), so no job is listed twice and none is skipped as long as Redis
// lets jobs go oldest first (the index is trimmed by creation time). A page that ends the index
// is filled from SQL; the cursor of a page read from SQL says so. Filters and the search (tags,
// window, error text) apply to both stores.
func List(ctx context.Context, db *pgxpool.Pool, stack *engine.Stack, q engine.ListQuery) (engine.Page, error) {
	if q.Limit <= 0 {
		q.Limit = 50
	}
	q.Limit = min(q.Limit, 200)
	if rest, ok := strings.CutPrefix(q.Cursor, sqlCursor); ok {
		ms, id, err := jobstore.DecodeCursor(rest)
		if err != nil {
			return engine.Page{}, fmt.Errorf("history: %w", err)
		}
		return listSQL(ctx, db, q, &position{ms, id}, q.Limit)
	}
	p, err := stack.List(ctx, q)
	if err != nil || p.Next != "" {
		return p, err
	}
	// The index has no more entries: continue after its last one (this page's, else the
	// cursor's, else the top).
	var after *position
	for _, c := range []string{p.Last, q.Cursor} {
		if c != "" {
			ms, id, err := jobstore.DecodeCursor(c)
			if err != nil {
				return engine.Page{}, fmt.Errorf("history: %w", err)
			}
			after = &position{ms, id}
			break
		}
	}
	rest, err := listSQL(ctx, db, q, after, q.Limit-len(p.Jobs))
	if err != nil {
		return engine.Page{}, err
	}
	p.Jobs, p.Next = append(p.Jobs, rest.Jobs...), rest.Next
	if rest.Last != "" {
		p.Last = rest.Last
	}
	return p, nil
}

// position is a list entry's place in the order: its created ms and job id.
type position struct {
	ms int64
	id string
}

// listSQL reads up to limit copies of q's jobs after (nil: from the newest), one query served by
// the (tenant, created_at DESC, job_id DESC) index. The tenant, the cursor and the creation window
// bound the index read; the other filters (status, type, tags, error text) are tested on the rows
// read, at most scanBudget(limit) of them a call: a filtered page may hold fewer than limit jobs
// while Next continues after the last row read, as the Redis index's pages do. Without the
// budget a search that matched little read every row of the tenant's history per request.
func listSQL(ctx context.Context, db *pgxpool.Pool, q engine.ListQuery, after *position, limit int) (engine.Page, error) {
	var where, filters []string
	var args []any
	arg := func(v any) string { args = append(args, v); return "$" + strconv.Itoa(len(args)) }
	if q.Tenant != "" {
		where = append(where, "tenant = "+arg(q.Tenant))
	}
	if after != nil {
		where = append(where, fmt.Sprintf("(created_at, job_id) < (%s, %s)", arg(time.UnixMilli(after.ms)), arg(after.id)))
	}
	if !q.CreatedAfter.IsZero() {
		where = append(where, "created_at >= "+arg(q.CreatedAfter))
	}
	if !q.CreatedBefore.IsZero() {
		where = append(where, "created_at < "+arg(q.CreatedBefore))
	}
	if q.Status != "" {
		filters = append(filters, "status = "+arg(string(q.Status)))
	}
	if q.Type != "" {
		filters = append(filters, "type = "+arg(q.Type))
	}
	if len(q.Tags) > 0 {
		op := "&&" // any
		if q.TagsMatch == jobstore.TagsAll {
			op = "@>"
		}
		filters = append(filters, "tags "+op+" "+arg(q.Tags)+"::text[]")
	}
	if q.Error != "" {
		filters = append(filters, "strpos(lower(record ->> 'last_error'), lower("+arg(q.Error)+")) > 0")
	}
	hit := "record"
	read := limit
	if len(filters) > 0 {
		hit = "CASE WHEN " + strings.Join(filters, " AND ") + " THEN record END"
		read = scanBudget(limit)
	}
	sql := "SELECT job_id, " + hit + " FROM jobguard_job_history"
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	sql += " ORDER BY created_at DESC, job_id DESC LIMIT " + arg(read)
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return engine.Page{}, fmt.Errorf("history: list: %w", err)
	}
	defer rows.Close()
	var p engine.Page
	n, lastRead := 0, ""
	for rows.Next() {
		var id string
		var raw []byte
		if err := rows.Scan(&id, &raw); err != nil {
			return engine.Page{}, fmt.Errorf("history: list: %w", err)
		}
		n++
		lastRead = id
		if raw == nil {
			continue // read, not matched
		}
		var rec map[string]string
		if err := json.Unmarshal(raw, &rec); err != nil {
			return engine.Page{}, fmt.Errorf("history: list: %w", err)
		}
		r := parse(rec)
		p.Jobs = append(p.Jobs, jobstore.Listed{JobID: r.JobID, Type: r.Type, Queue: r.Queue, Tenant: r.Tenant, Status: r.Status,
			Attempt: r.Attempt, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, FinishedAt: r.FinishedAt, Tags: r.Tags,
			LastError: r.LastError, Progress: r.Progress, ProgressAt: r.ProgressAt})
		if len(p.Jobs) == limit {
			break // a full page: the next one starts after its last job
		}
	}
	if err := rows.Err(); err != nil {
		return engine.Page{}, fmt.Errorf("history: list: %w", err)
	}
	cursor := func(id string) string { return sqlCursor + jobstore.EncodeCursor(jobstore.CreatedMS(id), id) }
	switch {
	case len(p.Jobs) == limit:
		p.Last = cursor(p.Jobs[limit-1].JobID)
		p.Next = p.Last
	case n == read:
		// The budget ran out before the page filled: the next page starts after the last row read.
		p.Last = cursor(lastRead)
		p.Next = p.Last
	case len(p.Jobs) > 0:
		p.Last = cursor(p.Jobs[len(p.Jobs)-1].JobID)
	}
	return p, nil
}

// scanBudget is how many rows a filtered SQL page reads at most.
func scanBudget(limit int) int { return max(20*limit, 200) }
