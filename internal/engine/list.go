package engine

import (
	"context"
	"fmt"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// ListQuery asks for one page of a tenant's jobs (see jobstore.ListQuery).
type ListQuery = jobstore.ListQuery

// Page is one page of a tenant's jobs, newest first.
type Page = jobstore.Page

// ErrBadCursor: a list cursor that no list handed out.
var ErrBadCursor = jobstore.ErrBadCursor

// List reads a page of a tenant's jobs, newest first, from the tenant's index (written when an
// enqueue is confirmed, trimmed to the retention): two round trips whatever the number of jobs.
func (s *Stack) List(ctx context.Context, q ListQuery) (Page, error) {
	p, err := s.store.List(ctx, q)
	if err != nil {
		return Page{}, fmt.Errorf("engine: %w", err)
	}
	return p, nil
}
