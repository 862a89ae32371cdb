package web

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"
)

// listJobs is a Jobs whose List pages over a fixed list (Next is the next index) and whose Cancel
// and Replay record their calls; refuse names jobs whose action fails as if they changed.
type listJobs struct {
	Jobs
	mu       sync.Mutex
	rows     []JobRow
	acted    []string
	refuse   map[string]bool
	listings int
}

func (l *listJobs) List(_ context.Context, q JobQuery) (JobPage, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.listings++
	from, _ := strconv.Atoi(q.Cursor)
	to := min(from+q.Limit, len(l.rows))
	p := JobPage{Jobs: l.rows[from:to]}
	if to < len(l.rows) {
		p.Next = strconv.Itoa(to)
	}
	return p, nil
}

func (l *listJobs) act(id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refuse[id] {
		return errors.New("job ended")
	}
	l.acted = append(l.acted, id)
	return nil
}

func (l *listJobs) Cancel(_ context.Context, id, _, _ string) error { return l.act(id) }
func (l *listJobs) Replay(_ context.Context, id string) error       { return l.act(id) }

// A bulk run acts on the eligible jobs of every page of the search, skips the rest and those
// refused when acted on, stops at BulkCap (another run goes on), and its confirmation acts on
// nothing.
func TestRunBulkCapsAndSkips(t *testing.T) {
	t.Parallel()
	jobs := &listJobs{refuse: map[string]bool{"j-3": true}}
	for i := range BulkCap + 300 {
		jobs.rows = append(jobs.rows, JobRow{ID: "j-" + strconv.Itoa(i), Ended: i%10 == 9, Failed: i%2 == 0})
	}
	p := &pages{jobs: jobs, timeout: time.Second}
	ctx := context.Background()

	preview, err := p.runBulk(ctx, "cancel", JobQuery{}, false)
	if err != nil || len(jobs.acted) != 0 || preview.Eligible != BulkCap || !preview.Capped {
		t.Fatalf("confirmation: %+v %v, acted on %d", preview, err, len(jobs.acted))
	}
	res, err := p.runBulk(ctx, "cancel", JobQuery{}, true)
	// 1,000 eligible (not ended) jobs are read among the first 1,111; j-3 is refused.
	if err != nil || !res.Capped || res.Eligible != BulkCap || res.Acted != BulkCap-1 || res.Matched != 1111 || res.Skipped != 111+1 {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	if len(jobs.acted) != BulkCap-1 || jobs.acted[0] != "j-0" {
		t.Fatalf("acted on %d, first %q", len(jobs.acted), jobs.acted[0])
	}

	jobs.acted = nil
	res, err = p.runBulk(ctx, "retry", JobQuery{}, true)
	if err != nil || res.Capped || res.Matched != len(jobs.rows) || res.Acted != len(jobs.rows)/2 || res.Skipped != len(jobs.rows)/2 {
		t.Fatalf("retry: %+v %v", res, err)
	}
	for _, id := range jobs.acted {
		n, _ := strconv.Atoi(id[2:])
		if n%2 != 0 {
			t.Fatalf("retried %s, which is not failed", id)
		}
	}
}
