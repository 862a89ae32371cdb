package jobstore

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A tenant's jobs are indexed in one sorted set of its own slot, <prefix>:{jobs:<tenant>} (score: the
// job's creation in unix ms, from its id; member: the id). Each write trims the entries older
// than the retention and sets the key's TTL to it, so the index never outgrows the records it
// points to; listing skips an id whose record expired first. Every job, of any tenant or none, is
// also in the index of all jobs, <prefix>:{jobs}, kept the same way: operators list across
// tenants from it (ListQuery with no Tenant) and the reconciler walks it.

// ErrBadCursor: a list cursor that no list handed out.
var ErrBadCursor = errors.New("jobstore: invalid list cursor")

// IndexKey is the key of tenant's job index; tenant "" is the index of all jobs.
func (s *Store) IndexKey(tenant string) string {
	if tenant == "" {
		return s.locks.Tag("jobs")
	}
	return s.locks.Tag("jobs:" + tenant)
}

// CreatedMS is the creation time a job id carries (unix ms), its index score; 0 when id is not a
// job id.
func CreatedMS(id string) int64 { return createdMS(id) }

// createdMS is the creation time a job id carries (unix ms); 0 when id is not a job id.
func createdMS(id string) int64 {
	if !ValidJobID(id) {
		return 0
	}
	n, err := strconv.ParseInt(id[17:29], 16, 64)
	if err != nil {
		return 0
	}
	return n
}

// QueueIndex adds job id of tenant to the tenant's index and to the index of all jobs in pipe (the
// enqueue's confirmation pipeline), trimming entries older than the retention from now.
func (s *Store) QueueIndex(ctx context.Context, pipe redis.Pipeliner, tenant, id string, now time.Time) {
	keys := []string{s.IndexKey("")}
	if tenant != "" {
		keys = append(keys, s.IndexKey(tenant))
	}
	for _, key := range keys {
		pipe.ZAdd(ctx, key, redis.Z{Score: float64(createdMS(id)), Member: id})
		pipe.ZRemRangeByScore(ctx, key, "-inf", "("+strconv.FormatInt(now.Add(-s.cfg.Retention).UnixMilli(), 10))
		pipe.PExpire(ctx, key, s.cfg.Retention)
	}
}

// ListQuery asks for one page of a tenant's jobs.
type ListQuery struct {
	// Tenant is whose jobs; "" lists every tenant's (operators only: the API always sets it).
	Tenant string
	// Status and Type filter the page ("" all): a filtered page may hold fewer than Limit jobs
	// while Next still continues.
	Status Status
	Type   string
	// Cursor is a page's Next ("" the newest first).
	Cursor string
	// Limit is the page size, 1-200 (default 50).
	Limit int
}

// Listed is one job in a list: the record's fields a list shows.
type Listed struct {
	JobID, Type, Queue, Tenant string
	Status                     Status
	Attempt                    int
	CreatedAt                  time.Time
	UpdatedAt                  time.Time
	FinishedAt                 time.Time
}

// Page is one page of a list; Next is "" after the last.
type Page struct {
	Jobs []Listed
	Next string
	// Last is the cursor of the page's last index entry, set even when Next is "" (a list that
	// continues in another store starts after it); "" when the page read no entry.
	Last string
}

// listFields are what a list reads of each record, in Listed's order.
var listFields = []string{FieldType, FieldQueue, FieldStatus, FieldAttempt, FieldCreatedAt, FieldUpdatedAt, FieldFinishedAt, FieldTenant}

// List reads a page of the tenant's jobs, newest first, in two round trips: the page of ids
// (scripts/list.lua), then their records (HMGET each, one pipeline).
func (s *Store) List(ctx context.Context, q ListQuery) (Page, error) {
	if q.Limit <= 0 {
		q.Limit = 50
	}
	q.Limit = min(q.Limit, 200)
	maxScore, after := "+inf", ""
	if q.Cursor != "" {
		score, id, err := decodeCursor(q.Cursor)
		if err != nil {
			return Page{}, err
		}
		maxScore, after = strconv.FormatInt(score, 10), id
	}
	res, err := listScript.Run(ctx, s.rdb, []string{s.IndexKey(q.Tenant)}, maxScore, after, q.Limit).Result()
	if err != nil {
		return Page{}, fmt.Errorf("jobstore: list: %w", err)
	}
	entries, err := replyStrings("list", res, 0)
	if err != nil || len(entries)%2 != 0 {
		return Page{}, replyError("list", res)
	}
	var page Page
	if len(entries) == 0 {
		return page, nil
	}
	n := len(entries)
	score, _ := strconv.ParseInt(entries[n-1], 10, 64)
	if page.Last = encodeCursor(score, entries[n-2]); n == 2*q.Limit {
		page.Next = page.Last
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, 0, len(entries)/2)
	for i := 0; i < len(entries); i += 2 {
		k, err := s.Keys(entries[i], "")
		if err != nil {
			return Page{}, replyError("list", res)
		}
		cmds = append(cmds, pipe.HMGet(ctx, k.Record, listFields...))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Page{}, fmt.Errorf("jobstore: list records: %w", err)
	}
	for i, c := range cmds {
		v := c.Val()
		if len(v) != len(listFields) {
			continue
		}
		f := make(map[string]string, len(listFields))
		for j, name := range listFields {
			if s, ok := v[j].(string); ok {
				f[name] = s
			}
		}
		if f[FieldStatus] == "" {
			continue // the record expired before its index entry
		}
		id := entries[2*i]
		derive(id, f) // a final record's created_at and updated_at
		l := Listed{JobID: id, Type: f[FieldType], Queue: f[FieldQueue], Status: Status(f[FieldStatus]), Attempt: atoi(f[FieldAttempt]),
			CreatedAt: stamp(f[FieldCreatedAt]), UpdatedAt: stamp(f[FieldUpdatedAt]), FinishedAt: stamp(f[FieldFinishedAt]), Tenant: f[FieldTenant]}
		if (q.Status != "" && l.Status != q.Status) || (q.Type != "" && l.Type != q.Type) {
			continue
		}
		page.Jobs = append(page.Jobs, l)
	}
	return page, nil
}

// A cursor is the last entry of a page, "<score>.<id>", base64url: opaque to clients.
func encodeCursor(score int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(score, 10) + "." + id))
}

// EncodeCursor is the cursor of the index entry of job id created at createdMS (unix ms), for a
// list that continues in another store with the same order.
func EncodeCursor(createdMS int64, id string) string { return encodeCursor(createdMS, id) }

// DecodeCursor is EncodeCursor's inverse; ErrBadCursor when c is not a cursor.
func DecodeCursor(c string) (createdMS int64, id string, err error) { return decodeCursor(c) }

func decodeCursor(c string) (int64, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", ErrBadCursor
	}
	sc, id, ok := strings.Cut(string(b), ".")
	score, err := strconv.ParseInt(sc, 10, 64)
	if !ok || err != nil || score < 0 || !ValidJobID(id) {
		return 0, "", ErrBadCursor
	}
	return score, id, nil
}
