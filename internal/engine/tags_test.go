package engine

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// A job's tags are folded, kept by its record through its end (a final record keeps them) and
// listed; tags that break the rules refuse the enqueue before anything is written.
func TestEnqueueKeepsTags(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "ok"}, func(context.Context, *Job) error { return nil })
	})
	id := h.enqueue(Spec{Type: "ok", Tenant: "t1", Tags: []string{"nightly", "eu", "nightly"}})
	v := h.waitStatus(id, "done", 10*time.Second)
	if !slices.Equal(v.Record.Tags, []string{"nightly", "eu"}) || v.Raw["tags"] != "nightly,eu" {
		t.Fatalf("done record's tags %v (raw %q)", v.Record.Tags, v.Raw["tags"])
	}
	p, err := h.stack.List(bg, ListQuery{Tenant: "t1", Tags: []string{"eu"}})
	if err != nil || len(p.Jobs) != 1 || p.Jobs[0].JobID != id {
		t.Fatalf("by tag: %+v %v", p, err)
	}
	_, err = h.stack.Enqueue(bg, h.client, Spec{Type: "ok", Tenant: "t1", Tags: []string{"no spaces"}})
	if !errors.Is(err, ErrBadTags) || !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("bad tag: %v", err)
	}
	if n := h.rdb.ZCard(bg, h.stack.store.IndexKey("t1")).Val(); n != 1 {
		t.Fatalf("a refused enqueue left %d index entries", n-1)
	}
}
