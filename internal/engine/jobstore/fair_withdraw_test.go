package jobstore

import (
	"fmt"
	"slices"
	"testing"
)

func (b fairBundle) withdraw(id string) bool {
	b.t.Helper()
	ok, err := b.s.FairWithdraw(bg, b.shard(), id)
	if err != nil {
		b.t.Fatal(err)
	}
	return ok
}

func (b fairBundle) backlog(key string) int64 {
	b.t.Helper()
	c, err := b.s.FairKeyCounts(bg, key, b.shard())
	if err != nil {
		b.t.Fatal(err)
	}
	return c.Backlog
}

// A withdrawal counts only a job still in its key's list: one that came after the job was
// admitted, started and freed (the cancel's round trip and the withdrawal's are two) changes
// nothing; it lowered the count of the jobs still waiting, and left an entry behind.
func TestFairWithdrawCountsOnlyAJobInItsList(t *testing.T) {
	t.Parallel()
	b := newFairBundle(t, FairPolicy{Capacity: 1, PerKey: 1, Batch: 10})
	if got := ids(b.wait("k", "x", 1)); !slices.Equal(got, []string{"x"}) {
		t.Fatalf("admitted %v, want x", got)
	}
	b.wait("k", "y", 1)
	b.wait("k", "z", 1)
	if _, got := b.done("x"); !slices.Equal(ids(got), []string{"y"}) {
		t.Fatalf("x's end admitted %v, want y", ids(got))
	}
	if b.withdraw("x") || b.withdraw("y") {
		t.Fatal("a job admitted (or admitted and freed) was withdrawn")
	}
	if n := b.backlog("k"); n != 1 {
		t.Fatalf("backlog %d with z waiting, want 1", n)
	}
	if !b.withdraw("z") || b.withdraw("z") {
		t.Fatal("z, waiting, was not withdrawn once")
	}
	if n := b.backlog("k"); n != 0 {
		t.Fatalf("backlog %d after z's withdrawal, want 0", n)
	}
	if _, got := b.done("y"); len(got) != 0 {
		t.Fatalf("y's end admitted %v: z was withdrawn", ids(got))
	}
	k := b.s.FairKeys(b.shard())
	if n := b.s.rdb.Exists(bg, k.Withdrawn, k.Once, k.WaitPrefix+"k", k.Backlog, k.Running, k.Ready).Val(); n != 0 {
		t.Fatalf("%d of the type's keys left behind", n)
	}
}

// One admission passes over at most 1,024 withdrawn entries: a key whose tenant cancelled 1,100
// waiting jobs keeps its turn, and the next call admits the job behind them, each call short.
func TestFairWithdrawnEntriesAreSkippedInBoundedCalls(t *testing.T) {
	t.Parallel()
	b := newFairBundle(t, FairPolicy{Capacity: 1, Batch: 10})
	b.wait("k", "first", 1)
	for i := range 2200 {
		b.wait("k", fmt.Sprintf("c%d", i), 1)
	}
	b.wait("k", "last", 1)
	for i := range 2200 {
		if !b.withdraw(fmt.Sprintf("c%d", i)) {
			t.Fatalf("c%d was not withdrawn", i)
		}
	}
	if n := b.backlog("k"); n != 1 {
		t.Fatalf("backlog %d, want 1 (last)", n)
	}
	if _, got := b.done("first"); len(got) != 0 {
		t.Fatalf("the first call admitted %v past 2,200 withdrawn entries", ids(got))
	}
	// A pump says when it stopped at its bound, so that its caller calls again at once.
	got, more, err := b.s.FairPump(bg, b.shard(), b.p)
	if err != nil || len(got) != 0 || !more {
		t.Fatalf("the second call admitted %v (more %v, %v), want none and more", ids(got), more, err)
	}
	got, more, err = b.s.FairPump(bg, b.shard(), b.p)
	if err != nil || !slices.Equal(ids(got), []string{"last"}) || more {
		t.Fatalf("the third call admitted %v (more %v, %v), want last and no more", ids(got), more, err)
	}
	k := b.s.FairKeys(b.shard())
	if n := b.s.rdb.Exists(bg, k.Withdrawn, k.Once).Val(); n != 0 {
		t.Fatalf("%d of the withdrawn and once hashes left behind", n)
	}
}
