package tasks

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
	"github.com/jobguard/jobguard/locking"
)

// Bypassing the API (jobs enqueued straight through the engine, or created before orders were
// claimed), o1 for s1 and o1 for s2 still apply once between them: the second to run fails for
// good with a stable message.
func TestOrderAppliesOnceAcrossSKUsWithoutTheAPI(t *testing.T) {
	t.Parallel()
	e := start(t, Deps{})
	a := e.enqueue(ReserveStockPayload{TenantID: "t1", OrderID: "o1", SKU: "s1", Quantity: 2}.Spec())
	b := e.enqueue(ReserveStockPayload{TenantID: "t1", OrderID: "o1", SKU: "s2", Quantity: 5}.Spec())
	ended := map[string]string{}
	for _, id := range []string{a, b} {
		ended[id] = e.waitEnd(id)
	}
	s1, _ := ReadStock(bg, e.stack.Locks(), "t1", "s1")
	s2, _ := ReadStock(bg, e.stack.Locks(), "t1", "s2")
	if applied := s1.OrdersApplied + s2.OrdersApplied; applied != 1 {
		t.Fatalf("o1 applied %d times (s1 %+v, s2 %+v; jobs %v)", applied, s1, s2, ended)
	}
	loser := b
	if s2.OrdersApplied == 1 {
		loser = a
	}
	v, _ := e.stack.Get(bg, loser)
	if v.Raw["status"] != "failed" || v.Raw["last_error"] != "order o1 conflicts with an earlier request" || v.Raw["attempt"] != "1" {
		t.Fatalf("the conflicting job: %v", v.Record)
	}
}

// waitEnd waits until the job is done or failed and returns that status.
func (e env) waitEnd(id string) string {
	e.t.Helper()
	var status string
	testsupport.Eventually(e.t, 20*time.Second, "job "+id+" ended", func() bool {
		v, err := e.stack.Get(bg, id)
		status = v.Raw["status"]
		return err == nil && (status == "done" || status == "failed")
	})
	return status
}

// The claim script, run twice by one caller (go-redis retries after a timeout), answers "created"
// then "same" with the caller's job; other content is a conflict that writes nothing; release
// removes only the caller's own claim.
func TestIdentityClaimScripts(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	locks := locking.New(db.Client, locking.WithPrefix("jobguard"))
	o := ReserveStockPayload{TenantID: "t1", OrderID: "o1", SKU: "s1", Quantity: 2}
	other := o
	other.SKU = "s2"
	steps := []struct {
		id    Identity
		job   string
		state ClaimState
		owner string
	}{
		{o.Identity(), "job-a", ClaimCreated, "job-a"},
		{o.Identity(), "job-a", ClaimSame, "job-a"},
		{o.Identity(), "job-b", ClaimSame, "job-a"},
		{other.Identity(), "job-c", ClaimConflict, "job-a"},
	}
	var c Claim
	for i, s := range steps {
		var err error
		c, err = ClaimIdentity(bg, locks, s.id, s.job, 0)
		if err != nil || c.State != s.state || c.JobID != s.owner || c.Key != "jobguard:{order:t1:o1}" {
			t.Fatalf("step %d: %+v %v", i, c, err)
		}
	}
	// A claim that reaches Redis past its caller's deadline writes nothing.
	late := ReserveStockPayload{TenantID: "t1", OrderID: "o-late", SKU: "s", Quantity: 1}
	if _, err := ClaimIdentity(bg, locks, late.Identity(), "job-l", 1); !errors.Is(err, ErrClaimExpired) {
		t.Fatalf("a claim past its deadline: %v", err)
	}
	if n := db.Client.Exists(bg, "jobguard:{order:t1:o-late}").Val(); n != 0 {
		t.Fatal("a claim past its deadline was written")
	}
	if c.Ours("job-c") {
		t.Fatal("a conflict is never the caller's")
	}
	if fp := db.Client.HGet(bg, c.Key, "fingerprint").Val(); fp != o.Identity().Fingerprint {
		t.Fatalf("the conflict overwrote the claim: %s", fp)
	}
	if removed, err := ReleaseIdentity(bg, locks, c, "job-b"); removed || err != nil {
		t.Fatalf("another request's release removed the claim: %v %v", removed, err)
	}
	mem := db.Client.MemoryUsage(bg, c.Key).Val()
	long := ReserveStockPayload{TenantID: strings.Repeat("t", 128), OrderID: strings.Repeat("o", 128), SKU: "s", Quantity: 1}
	if _, err := ClaimIdentity(bg, locks, long.Identity(), engine.NewJobID("x", time.Now()), 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("one order claim: %d bytes; with 128-character tenant and order ids: %d bytes (MEMORY USAGE)",
		mem, db.Client.MemoryUsage(bg, locks.Tag(long.Identity().Name)).Val())
	if removed, err := ReleaseIdentity(bg, locks, c, "job-a"); !removed || err != nil {
		t.Fatalf("the creator's release: %v %v", removed, err)
	}
	if _, err := ClaimIdentity(bg, locks, Identity{Name: "order:{x}"}, "j", 0); err == nil {
		t.Fatal("a name that would change the hash tag was accepted")
	}
}
