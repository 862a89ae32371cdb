package tasks

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/locking"
)

// ClaimIdentities claims in order and answers each at its own index, as ClaimIdentity would one
// at a time, also on a server that does not have the claim script yet (flushed: its claims go
// again once it is loaded).
func TestClaimIdentitiesAnswersEachInOrder(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	locks := locking.New(rdb)
	id := func(name, content string) Identity {
		return Identity{Name: name, Fingerprint: Fingerprint(content), Field: "order_id", What: "order " + name}
	}
	claims, errs := ClaimIdentities(ctx, locks, []ClaimRequest{
		{ID: id("o1", "a"), JobID: "j1"},
		{ID: id("o2", "a"), JobID: "j2"},
		{ID: id("o1", "a"), JobID: "j3"}, // the same order and content again: the first's claim
		{ID: id("o2", "b"), JobID: "j4"}, // other content
		{ID: id("bad{name", "a"), JobID: "j5"},
	}, 0)
	want := []struct {
		state ClaimState
		job   string
	}{{ClaimCreated, "j1"}, {ClaimCreated, "j2"}, {ClaimSame, "j1"}, {ClaimConflict, "j2"}}
	for i, w := range want {
		if errs[i] != nil || claims[i].State != w.state || claims[i].JobID != w.job {
			t.Errorf("claim %d: %+v %v, want %s naming %s", i, claims[i], errs[i], w.state, w.job)
		}
	}
	if errs[4] == nil {
		t.Errorf("an invalid identity name was claimed: %+v", claims[4])
	}
	// One claim alone, after the batch, sees what the batch bound.
	if c, err := ClaimIdentity(ctx, locks, id("o2", "a"), "j6", 0); err != nil || c.State != ClaimSame || c.JobID != "j2" {
		t.Fatalf("o2 after the batch: %+v %v", c, err)
	}
}
