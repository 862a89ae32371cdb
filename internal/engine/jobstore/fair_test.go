package jobstore

import (
	"fmt"
	"slices"
	"testing"

	"github.com/jobguard/jobguard/internal/keyslot"
)

// fairBundle drives one type's admission scripts on a fresh database.
type fairBundle struct {
	t   *testing.T
	s   *Store
	typ string
	p   FairPolicy
}

func newFairBundle(t *testing.T, p FairPolicy) fairBundle {
	t.Helper()
	return fairBundle{t: t, s: newStore(t), typ: "work", p: p}
}

// shard is the type's one shard.
func (b fairBundle) shard() FairShard { return FairShard{Type: b.typ} }

func (b fairBundle) wait(key, id string, weight int) []FairEntry {
	b.t.Helper()
	got, err := b.s.FairWait(bg, b.shard(), key, id, "", weight, b.p, false)
	if err != nil {
		b.t.Fatal(err)
	}
	return got
}

func (b fairBundle) done(id string) (bool, []FairEntry) {
	b.t.Helper()
	freed, got, err := b.s.FairDone(bg, b.shard(), []string{id}, b.p)
	if err != nil {
		b.t.Fatal(err)
	}
	return freed == 1, got
}

func ids(entries []FairEntry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.JobID
	}
	return out
}

// A key alone is admitted up to the capacity (work-conserving); a key that arrives behind a
// backlog is admitted at the next freed place, not after the backlog.
func TestFairAdmitsNewKeyBeforeBacklog(t *testing.T) {
	t.Parallel()
	b := newFairBundle(t, FairPolicy{Capacity: 3, Batch: 10})
	var admitted []string
	for i := range 100 {
		admitted = append(admitted, ids(b.wait("a", fmt.Sprintf("a%d", i), 1))...)
	}
	if fmt.Sprint(admitted) != "[a0 a1 a2]" {
		t.Fatalf("a lone key was admitted %v, want its first 3 (the capacity)", admitted)
	}
	if got := b.wait("b", "b0", 1); len(got) != 0 {
		t.Fatalf("admitted %v beyond the capacity", ids(got))
	}
	freed, next := b.done("a0")
	if !freed || fmt.Sprint(ids(next)) != "[b0]" {
		t.Fatalf("after a0 ended: freed %v, admitted %v; want b0 before a's 97 waiting jobs", freed, ids(next))
	}
	if freed, again := b.done("a0"); freed || len(again) != 0 {
		t.Fatalf("a second done of a0 freed %v and admitted %v", freed, ids(again))
	}
}

// Under contention admissions follow the weights: 5:1 over 600 admissions.
func TestFairAdmissionsFollowWeights(t *testing.T) {
	t.Parallel()
	b := newFairBundle(t, FairPolicy{Capacity: 1, Batch: 1})
	for i := range 600 {
		b.wait("heavy", fmt.Sprintf("h%d", i), 5)
		b.wait("light", fmt.Sprintf("l%d", i), 1)
	}
	counts := map[string]int{}
	current := "h0" // admitted by the first wait
	for range 600 {
		_, next := b.done(current)
		if len(next) != 1 {
			t.Fatalf("done admitted %v, want one", ids(next))
		}
		counts[next[0].Key]++
		current = next[0].JobID
	}
	// Stride scheduling is exact to one round: a key that joins starts at the virtual time.
	if h, l := counts["heavy"], counts["light"]; h+l != 600 || h < 495 || h > 505 {
		t.Fatalf("admissions %v, want 5:1 of 600 to one round (heavy 495-505)", counts)
	}
}

// A key at its per-key limit keeps its jobs waiting (no bounce) while other keys go on; its next
// job is admitted, in order, when one of its own ends.
func TestFairPerKeyLimitWaitsInOrder(t *testing.T) {
	t.Parallel()
	b := newFairBundle(t, FairPolicy{Capacity: 10, PerKey: 1, Batch: 10})
	var admitted []string
	for i := range 3 {
		admitted = append(admitted, ids(b.wait("s", fmt.Sprintf("s%d", i), 1))...)
	}
	admitted = append(admitted, ids(b.wait("t", "t0", 1))...)
	if fmt.Sprint(admitted) != "[s0 t0]" {
		t.Fatalf("admitted %v, want s0 and t0 only (one per key)", admitted)
	}
	_, next := b.done("s0")
	if fmt.Sprint(ids(next)) != "[s1]" {
		t.Fatalf("after s0: %v, want s1", ids(next))
	}
	_, next = b.done("s1")
	if fmt.Sprint(ids(next)) != "[s2]" {
		t.Fatalf("after s1: %v, want s2", ids(next))
	}
}

// One call frees a batch of ends (each once, a repeated id too) and admits as many as it freed,
// even past the policy's batch.
func TestFairDoneFreesABatch(t *testing.T) {
	t.Parallel()
	b := newFairBundle(t, FairPolicy{Capacity: 4, Batch: 1})
	var admitted []string
	for i := range 4 {
		admitted = append(admitted, ids(b.wait("a", fmt.Sprintf("a%d", i), 1))...)
	}
	for i := range 3 {
		b.wait("b", fmt.Sprintf("b%d", i), 1)
	}
	if fmt.Sprint(admitted) != "[a0 a1 a2 a3]" {
		t.Fatalf("admitted %v, want a's four (a key alone fills the capacity)", admitted)
	}
	freed, next, err := b.s.FairDone(bg, b.shard(), []string{"a0", "a1", "a0", "a2", "nope"}, b.p)
	if err != nil {
		t.Fatal(err)
	}
	if freed != 3 {
		t.Fatalf("freed %d, want 3 (a0 once, a1, a2; nope holds nothing)", freed)
	}
	if got := fmt.Sprint(ids(next)); got != "[b0 b1 b2]" {
		t.Fatalf("after three ends: %v, want b's three in order (a has nothing waiting)", got)
	}
}

// An idle key leaves nothing behind but the virtual time, which expires.
func TestFairIdleKeyLeavesNothing(t *testing.T) {
	t.Parallel()
	b := newFairBundle(t, FairPolicy{Capacity: 2, Batch: 10})
	b.wait("k", "k0", 3)
	b.done("k0")
	k := b.s.FairKeys(b.shard())
	n, err := b.s.rdb.Exists(bg, k.Ready, k.Backlog, k.Running, k.Admitted, k.Weight, k.Pass, k.WaitPrefix+"k").Result()
	if err != nil || n != 0 {
		t.Fatalf("%d admission keys left for an idle type (err %v)", n, err)
	}
	if ttl := b.s.rdb.PTTL(bg, k.VTime).Val(); ttl <= 0 || ttl > b.s.cfg.Retention {
		t.Fatalf("virtual time's TTL %s, want within the retention", ttl)
	}
}

// Counts name the top keys, bounded.
func TestFairCountsTopKeys(t *testing.T) {
	t.Parallel()
	b := newFairBundle(t, FairPolicy{Capacity: 1, Batch: 10})
	for i := range 5 {
		b.wait("big", fmt.Sprintf("big%d", i), 1)
	}
	for i := range 20 {
		b.wait(fmt.Sprintf("small%d", i), fmt.Sprintf("x%d", i), 1)
	}
	c, err := b.s.FairCounts(bg, b.typ, 1, nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	if c.Admitted != 1 || c.WaitingKeys != 21 || len(c.TopKeys) > 4 || c.TopKeys[0] != (FairKeyCount{Key: "big", Backlog: 4, Running: 1}) {
		t.Fatalf("counts %+v", c)
	}
}

// An admitted job's delivery starts it from waiting (its delivery exists only once admitted).
func TestFairWaitingJobStarts(t *testing.T) {
	t.Parallel()
	j := newScriptJob(t, "waiting", 0)
	if st := j.start("o1"); st != "run" {
		t.Fatalf("start of an admitted waiting job: %s, want run", st)
	}
}

// The admitted hash keeps each admitted job's key and delivery data, for the sweep.
func TestFairAdmittedKeepsDeliveryData(t *testing.T) {
	t.Parallel()
	b := newFairBundle(t, FairPolicy{Capacity: 2, Batch: 10})
	if _, err := b.s.FairWait(bg, b.shard(), "k", "j1", `{"h":{"x":"y"}}`, 1, b.p, false); err != nil {
		t.Fatal(err)
	}
	got, err := b.s.FairAdmittedJobs(bg, b.shard())
	if err != nil || len(got) != 1 || got[0] != (FairEntry{JobID: "j1", Key: "k", Data: `{"h":{"x":"y"}}`, Shard: b.shard()}) {
		t.Fatalf("admitted %+v %v", got, err)
	}
}

// A wait told once (a workflow node's) is not repeated while its job waits or is admitted: a
// release decided twice puts the node in its list once, and counts its admission once.
func TestFairWaitOnce(t *testing.T) {
	t.Parallel()
	b := newFairBundle(t, FairPolicy{Capacity: 1, PerKey: 1, Batch: 10})
	once := func(id string) []string {
		t.Helper()
		got, err := b.s.FairWait(bg, b.shard(), "k", id, "", 1, b.p, true)
		if err != nil {
			t.Fatal(err)
		}
		return ids(got)
	}
	if got := once("n1"); fmt.Sprint(got) != "[n1]" {
		t.Fatalf("first wait admitted %v, want n1", got)
	}
	once("n1") // admitted already: nothing
	once("n2")
	once("n2") // waiting already: nothing
	if c, _ := b.s.FairKeyCounts(bg, "k", b.shard()); c.Backlog != 1 || c.Running != 1 {
		t.Fatalf("key counts %+v, want 1 waiting (n2 once), 1 running (n1 once)", c)
	}
	if _, next := b.done("n1"); fmt.Sprint(ids(next)) != "[n2]" {
		t.Fatalf("after n1: %v, want n2", ids(next))
	}
	if freed, next := b.done("n2"); !freed || len(next) != 0 {
		t.Fatalf("after n2: freed %v, admitted %v; want freed and nothing left", freed, ids(next))
	}
	k := b.s.FairKeys(b.shard())
	if n := b.s.rdb.Exists(bg, k.Once, k.Admitted, k.Running, k.WaitPrefix+"k").Val(); n != 0 {
		t.Fatalf("%d admission keys left behind", n)
	}
}

// A type's shards keep their keys apart (a tag each, in its share of the slot space), and the
// counts add them up: the totals over every shard, the top keys over every shard's.
func TestFairCountsAddTheShardsUp(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	p := FairPolicy{Capacity: 1, Batch: 10}
	shards := FairShards("spread", 3)
	for i, sh := range shards {
		if slot := keyslot.Of(s.FairKeys(sh).Ready); slot < i*keyslot.Slots/3 || slot >= (i+1)*keyslot.Slots/3 {
			t.Fatalf("shard %d's slot %d is outside its third of the slots", i, slot)
		}
		// Key "k<i>" gets i+2 jobs in shard i: one admitted (capacity 1), the others waiting.
		for j := range i + 2 {
			if _, err := s.FairWait(bg, sh, fmt.Sprint("k", i), fmt.Sprint("j", i, j), "", 1, p, false); err != nil {
				t.Fatal(err)
			}
		}
	}
	c, err := s.FairCounts(bg, "spread", 3, nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	if c.Admitted != 3 || c.WaitingKeys != 3 || c.RunningKeys != 3 {
		t.Fatalf("totals %+v, want 3 admitted, 3 keys waiting and running", c)
	}
	want := []FairKeyCount{{Key: "k2", Backlog: 3, Running: 1}, {Key: "k1", Backlog: 2, Running: 1}, {Key: "k0", Backlog: 1, Running: 1}}
	if !slices.Equal(c.TopKeys, want) {
		t.Fatalf("top keys %+v, want %+v", c.TopKeys, want)
	}
}

// A layouts set holding what no process records (a count out of bounds, not a number) costs
// the readers nothing: they skip it.
func TestFairLayoutsSkipsWhatNoProcessRecords(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	key := s.FairKeys(FairShard{Type: "odd"}).Layouts
	if err := s.rdb.SAdd(bg, key, "3", "0", "-2", "1000000", "x", "1024").Err(); err != nil {
		t.Fatal(err)
	}
	got, err := s.FairLayouts(bg, "odd")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, []int{3, 1024}) {
		t.Fatalf("layouts %v, want [3 1024]", got)
	}
}

// A job's wait sent twice (a client that lost the first reply sends it again) puts it in its
// key's list once, whether it waits or was admitted meanwhile: only a workflow node's wait was
// done once, and a plain job's second wait was a second entry, delivered and counted again.
func TestAWaitSentTwiceListsTheJobOnce(t *testing.T) {
	t.Parallel()
	b := newFairBundle(t, FairPolicy{Capacity: 1, Batch: 10})
	if got := ids(b.wait("k", "x", 1)); fmt.Sprint(got) != "[x]" {
		t.Fatalf("admitted %v, want x", got)
	}
	if got := ids(b.wait("k", "x", 1)); len(got) != 0 {
		t.Fatalf("x's wait again (admitted) admitted %v", got)
	}
	b.wait("k", "y", 1)
	b.wait("k", "y", 1)
	if n := b.backlog("k"); n != 1 {
		t.Fatalf("backlog %d after y's wait twice, want 1", n)
	}
	if _, next := b.done("x"); fmt.Sprint(ids(next)) != "[y]" {
		t.Fatalf("x's end admitted %v, want y", ids(next))
	}
	if _, next := b.done("y"); len(next) != 0 {
		t.Fatalf("y's end admitted %v, want nothing (y was listed once)", ids(next))
	}
}
