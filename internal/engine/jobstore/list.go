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

// IndexKey is the key of tenant's unstriped job index (stripes.go: the only one on one Redis);
// tenant "" is the index of all jobs.
func (s *Store) IndexKey(tenant string) string { return s.locks.Tag(indexTag(tenant)) }

// IndexKeyOf is the key of the stripe of tenant's job index that holds job id.
func (s *Store) IndexKeyOf(tenant, id string) string {
	return s.locks.Tag(s.stripeTag(indexTag(tenant), s.stripeOfID(id)))
}

// indexKeys are the keys of tenant's job index a list merges: the unstriped one, then every
// stripe's.
func (s *Store) indexKeys(tenant string) []string {
	tags := s.stripeTags(indexTag(tenant))
	keys := make([]string, len(tags))
	for i, t := range tags {
		keys[i] = s.locks.Tag(t)
	}
	return keys
}

// indexTag is the hash tag of tenant's unstriped job index.
func indexTag(tenant string) string {
	if tenant == "" {
		return "jobs"
	}
	return "jobs:" + tenant
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
// enqueue's confirmation pipeline), and to the indexes of its tags beside each, trimming entries
// older than the retention from now and setting each key's TTL to the retention: an index lives
// no longer than the jobs it lists, so nothing here grows with finished jobs.
func (s *Store) QueueIndex(ctx context.Context, pipe redis.Pipeliner, tenant, id string, tags []string, now time.Time) {
	s.QueueIndexMany(ctx, pipe, tenant, []string{id}, tags, now)
}

// How a list matches a query's tags.
const (
	// TagsAny: a job with any of the tags (the default).
	TagsAny = "any"
	// TagsAll: a job with every one of them.
	TagsAll = "all"
)

// QueueIndexMany is QueueIndex of many jobs of one tenant with the same tags, in one ZADD per
// index stripe.
func (s *Store) QueueIndexMany(ctx context.Context, pipe redis.Pipeliner, tenant string, ids, tags []string, now time.Time) {
	if len(ids) == 0 {
		return
	}
	tenants := []string{""}
	if tenant != "" {
		tenants = append(tenants, tenant)
	}
	cut := "(" + strconv.FormatInt(now.Add(-s.cfg.Retention).UnixMilli(), 10)
	for _, t := range tenants {
		byIndex := map[string][]redis.Z{}
		var order []string
		for _, id := range ids {
			index := s.IndexKeyOf(t, id)
			if byIndex[index] == nil {
				order = append(order, index)
			}
			byIndex[index] = append(byIndex[index], redis.Z{Score: float64(createdMS(id)), Member: id})
		}
		for _, index := range order {
			keys := []string{index}
			for _, tag := range tags {
				keys = append(keys, index+tagIndexSuffix+tag)
			}
			for _, key := range keys {
				pipe.ZAdd(ctx, key, byIndex[index]...)
				pipe.ZRemRangeByScore(ctx, key, "-inf", cut)
				pipe.PExpire(ctx, key, s.cfg.Retention)
			}
		}
	}
}

// ListQuery asks for one page of a tenant's jobs.
type ListQuery struct {
	// Tenant is whose jobs; "" lists every tenant's (operators only: the API always sets it).
	Tenant string
	// Tags (normalized: NormalizeTags) select the jobs of the tags' indexes, any or all of them
	// (TagsMatch: TagsAny, the default, or TagsAll); nil: every job of the tenant's index.
	Tags      []string
	TagsMatch string
	// CreatedAfter (inclusive) and CreatedBefore (exclusive) bound the jobs' creation (zero: no
	// bound); they bound the index read, so a window costs nothing past it.
	CreatedAfter, CreatedBefore time.Time
	// Status, Type and Error (a case-insensitive substring of last_error) filter the page ("" all):
	// a filtered page may hold fewer than Limit jobs while Next still continues.
	Status Status
	Type   string
	Error  string
	// Cursor is a page's Next ("" the newest first).
	Cursor string
	// Limit is the page size, 1-200 (default 50).
	Limit int
}

// Filtered reports whether q filters the entries it reads (status, type, error): its pages may be
// short while Next continues.
func (q ListQuery) Filtered() bool { return q.Status != "" || q.Type != "" || q.Error != "" }

// Match reports whether a listed job passes q's status, type and error filters.
func (q ListQuery) Match(l Listed) bool {
	return (q.Status == "" || l.Status == q.Status) && (q.Type == "" || l.Type == q.Type) &&
		(q.Error == "" || strings.Contains(strings.ToLower(l.LastError), strings.ToLower(q.Error)))
}

// Listed is one job in a list: the record's fields a list shows.
type Listed struct {
	JobID, Type, Queue, Tenant string
	Status                     Status
	Attempt                    int
	CreatedAt                  time.Time
	UpdatedAt                  time.Time
	FinishedAt                 time.Time
	Tags                       []string
	LastError                  string
	// Progress (0-100) is the last the handler reported; ProgressAt is zero when none did.
	Progress   int
	ProgressAt time.Time
	// Workflow is the record's FieldWorkflow ("<workflow id>:<node id>", "" for no workflow's node).
	Workflow string
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
var listFields = []string{FieldType, FieldQueue, FieldStatus, FieldAttempt, FieldCreatedAt, FieldUpdatedAt, FieldFinishedAt, FieldTenant,
	FieldTags, FieldLastError, FieldProgress, FieldProgressAt, FieldWorkflow}

// indexEntry is one entry of a job index.
type indexEntry struct {
	id    string
	score int64
}

// listEntries runs scripts/list.lua: up to limit entries of keys after (maxScore, after), not
// below minScore; resume is the entry to continue after when the 'all' walk stopped at its
// budget (nil otherwise).
func (s *Store) listEntries(ctx context.Context, keys []string, maxScore, after string, limit int, minScore, match string) ([]indexEntry, *indexEntry, error) {
	res, err := listScript.Run(ctx, s.rdb, keys, maxScore, after, limit, minScore, match).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("jobstore: list: %w", err)
	}
	return parseListReply(res)
}

// parseListReply unpacks scripts/list.lua's reply: the entries, and where to resume (nil none).
func parseListReply(res any) ([]indexEntry, *indexEntry, error) {
	parts, ok := res.([]any)
	if !ok || len(parts) != 3 {
		return nil, nil, replyError("list", res)
	}
	flat, err := replyStrings("list", parts[0], 0)
	if err != nil || len(flat)%2 != 0 {
		return nil, nil, replyError("list", res)
	}
	entry := func(id, score string) (indexEntry, bool) {
		n, err := strconv.ParseInt(score, 10, 64)
		return indexEntry{id, n}, err == nil && ValidJobID(id)
	}
	out := make([]indexEntry, 0, len(flat)/2)
	for i := 0; i < len(flat); i += 2 {
		e, ok := entry(flat[i], flat[i+1])
		if !ok {
			return nil, nil, replyError("list", res)
		}
		out = append(out, e)
	}
	rid, _ := parts[1].(string)
	if rid == "" {
		return out, nil, nil
	}
	rscore, _ := parts[2].(string)
	e, ok := entry(rid, rscore)
	if !ok {
		return nil, nil, replyError("list", res)
	}
	return out, &e, nil
}

// List reads a page of the tenant's jobs, newest first, in two round trips: the page of ids
// (scripts/list.lua, from the tenant's index or its tags', each stripe's in one pipeline, merged),
// then their records (HMGET each, one pipeline).
func (s *Store) List(ctx context.Context, q ListQuery) (Page, error) {
	if q.Limit <= 0 {
		q.Limit = 50
	}
	q.Limit = min(q.Limit, 200)
	maxScore, after, minScore := "+inf", "", "-inf"
	if !q.CreatedBefore.IsZero() {
		maxScore = strconv.FormatInt(q.CreatedBefore.UnixMilli()-1, 10)
	}
	if !q.CreatedAfter.IsZero() {
		minScore = strconv.FormatInt(q.CreatedAfter.UnixMilli(), 10)
	}
	if q.Cursor != "" {
		score, id, err := decodeCursor(q.Cursor)
		if err != nil {
			return Page{}, err
		}
		// The cursor bounds the read unless the window's end is older than it.
		if q.CreatedBefore.IsZero() || score <= q.CreatedBefore.UnixMilli()-1 {
			maxScore, after = strconv.FormatInt(score, 10), id
		}
	}
	var keysets [][]string
	for _, index := range s.indexKeys(q.Tenant) {
		keys := []string{index}
		if len(q.Tags) > 0 {
			keys = keys[:0]
			for _, tag := range q.Tags {
				keys = append(keys, index+tagIndexSuffix+tag)
			}
		}
		keysets = append(keysets, keys)
	}
	match := TagsAny
	if q.TagsMatch == TagsAll {
		match = TagsAll
	}
	entries, resume, err := s.listMerged(ctx, keysets, maxScore, after, q.Limit, minScore, match)
	if err != nil {
		return Page{}, err
	}
	var page Page
	switch {
	case resume != nil:
		page.Last = encodeCursor(resume.score, resume.id)
		page.Next = page.Last
	case len(entries) > 0:
		last := entries[len(entries)-1]
		if page.Last = encodeCursor(last.score, last.id); len(entries) == q.Limit {
			page.Next = page.Last
		}
	}
	if len(entries) == 0 {
		return page, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, 0, len(entries))
	for _, e := range entries {
		k, err := s.Keys(e.id, "")
		if err != nil {
			return Page{}, fmt.Errorf("jobstore: list: %w", err)
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
		id := entries[i].id
		derive(id, f) // a final record's created_at and updated_at
		l := Listed{JobID: id, Type: f[FieldType], Queue: f[FieldQueue], Status: Status(f[FieldStatus]), Attempt: atoi(f[FieldAttempt]),
			CreatedAt: stamp(f[FieldCreatedAt]), UpdatedAt: stamp(f[FieldUpdatedAt]), FinishedAt: stamp(f[FieldFinishedAt]), Tenant: f[FieldTenant],
			Tags: splitTags(f[FieldTags]), LastError: f[FieldLastError], Progress: atoi(f[FieldProgress]), ProgressAt: stamp(f[FieldProgressAt]),
			Workflow: f[FieldWorkflow]}
		if !q.Match(l) {
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
