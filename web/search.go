package web

import (
	"context"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
)

// The jobs page's search: tenant, status, type, tags (any or all), error text and a creation
// window, read from the query string of the page, its counts, its live refresh and its bulk
// actions alike, so each acts on exactly what the page shows.

// search is a parsed search: the query and the form's values as given (to fill the form and to
// build links).
type search struct {
	Q JobQuery
	// Tags, Since, After and Before are the form's inputs as typed.
	Tags, Since, After, Before string
}

// sinceChoices are the rolling windows the form offers (created within the last ...).
var sinceChoices = []string{"15m", "1h", "6h", "24h", "168h"}

// windowLayouts are what the window's inputs accept: RFC 3339, or a datetime-local input's value
// (read as UTC).
var windowLayouts = []string{time.RFC3339, "2006-01-02T15:04", "2006-01-02T15:04:05"}

func badSearch(field, detail string) error {
	return &fiber.Error{Code: fiber.StatusBadRequest, Message: field + ": " + detail}
}

// searchOf reads the search from c's query string; every string is copied (they outlive
// fasthttp's buffers in the page's data).
func searchOf(c *fiber.Ctx, now time.Time) (search, error) {
	get := func(k string) string { return strings.TrimSpace(strings.Clone(c.Query(k))) }
	s := search{
		Q: JobQuery{Tenant: get("tenant"), Status: get("status"), Type: get("type"), Cursor: get("cursor"),
			Error: get("error"), TagsMatch: get("match"), Limit: 50},
		Tags: get("tags"), Since: get("since"), After: get("created_after"), Before: get("created_before"),
	}
	if n, err := strconv.Atoi(c.Query("limit")); err == nil && n > 0 {
		s.Q.Limit = min(n, maxPageRows)
	}
	if s.Q.TagsMatch != "" && s.Q.TagsMatch != "any" && s.Q.TagsMatch != "all" {
		return s, badSearch("match", "must be any or all")
	}
	s.Q.Tags = strings.FieldsFunc(s.Tags, func(r rune) bool { return r == ',' || r == ' ' })
	if s.Since != "" {
		d, err := time.ParseDuration(s.Since)
		if err != nil || d <= 0 {
			return s, badSearch("since", "must be a duration such as 1h")
		}
		s.Q.CreatedAfter = now.Add(-d)
	}
	for _, w := range []struct {
		name, raw string
		to        *time.Time
	}{{"created_after", s.After, &s.Q.CreatedAfter}, {"created_before", s.Before, &s.Q.CreatedBefore}} {
		if w.raw == "" {
			continue
		}
		t, err := parseWindow(w.raw)
		if err != nil {
			return s, badSearch(w.name, "must be a time such as 2026-12-03T10:00 (UTC) or RFC 3339")
		}
		if w.to.IsZero() || t.After(*w.to) { // with since too, the later start wins
			*w.to = t
		}
	}
	return s, nil
}

func parseWindow(v string) (time.Time, error) {
	var err error
	for _, layout := range windowLayouts {
		var t time.Time
		if t, err = time.ParseInLocation(layout, v, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, err
}

// values are the search's parameters (no cursor), for links that keep it.
func (s search) values() url.Values {
	v := url.Values{}
	for k, val := range map[string]string{"tenant": s.Q.Tenant, "status": s.Q.Status, "type": s.Q.Type, "error": s.Q.Error,
		"tags": s.Tags, "match": s.Q.TagsMatch, "since": s.Since, "created_after": s.After, "created_before": s.Before} {
		if val != "" {
			v.Set(k, val)
		}
	}
	return v
}

// with is the search's parameters with k set to val ("" removes it), encoded.
func (s search) with(kv ...string) string {
	v := s.values()
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			v.Del(kv[i])
		} else {
			v.Set(kv[i], kv[i+1])
		}
	}
	return v.Encode()
}

// countPages bounds the entries a count reads (pages of maxPageRows): past it the counts are a
// lower bound, and the page says so.
const countPages = 25

// count is one row of the counts: a status or type, its jobs, and the page's search for it.
type count struct {
	Name string
	N    int
	URL  string
}

// counts are the jobs per status and per type of a search's tenant, window, tags and error text
// (its status and type left out, so the counts say what choosing one would show).
type counts struct {
	Total           int
	Statuses, Types []count
	Truncated       bool
}

// allStatuses are the job statuses, in the engine's order (waiting, of fair dispatch, first), shown even at zero.
var allStatuses = []string{"waiting", "queued", "processing", "retrying", "done", "failed", "revoked", "cancelled", "expired"}

// countJobs reads the search's jobs page by page, up to countPages pages; its links go to the
// jobs page under root.
func countJobs(ctx context.Context, jobs Jobs, root string, s search) (counts, error) {
	q := s.Q
	q.Status, q.Type, q.Cursor, q.Limit = "", "", "", maxPageRows
	byStatus, byType := map[string]int{}, map[string]int{}
	var out counts
	for page := 0; ; page++ {
		if page == countPages {
			out.Truncated = true
			break
		}
		p, err := jobs.List(ctx, q)
		if err != nil {
			return counts{}, err
		}
		for _, j := range p.Jobs {
			out.Total++
			byStatus[j.Status]++
			byType[j.Type]++
		}
		if p.Next == "" {
			break
		}
		q.Cursor = p.Next
	}
	for _, st := range allStatuses {
		out.Statuses = append(out.Statuses, count{Name: st, N: byStatus[st], URL: root + "/jobs?" + s.with("status", st, "type", "")})
	}
	for t, n := range byType {
		out.Types = append(out.Types, count{Name: t, N: n, URL: root + "/jobs?" + s.with("type", t, "status", "")})
	}
	sort.Slice(out.Types, func(i, j int) bool { return out.Types[i].Name < out.Types[j].Name })
	return out, nil
}
