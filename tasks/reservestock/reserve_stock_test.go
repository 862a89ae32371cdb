package reservestock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/locking"
	"github.com/jobguard/jobguard/tasks"
	"github.com/jobguard/jobguard/tasks/internal/tasktest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var bg = context.Background()

// start runs reserve-stock alone on a real worker.
func start(t *testing.T, deps tasks.Deps) tasktest.Env {
	return tasktest.Start(t, deps, []tasks.Task{Task})
}

func TestReserveStockAppliesEachOrderOnce(t *testing.T) {
	t.Parallel()
	e := start(t, tasks.Deps{})
	order := ReserveStockPayload{TenantID: "t1", OrderID: "o-1", SKU: "sku-9", Quantity: 3}
	var ids []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ { // the same order, submitted concurrently
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := e.Enqueue(order.Spec())
			mu.Lock()
			ids = append(ids, id)
			mu.Unlock()
		}()
	}
	wg.Wait()
	other := ReserveStockPayload{TenantID: "t1", OrderID: "o-2", SKU: "sku-9", Quantity: 4}
	ids = append(ids, e.Enqueue(other.Spec()))
	applied, distinct := 0, map[string]bool{}
	for _, id := range ids {
		if distinct[id] {
			continue
		}
		distinct[id] = true
		if v := e.Wait(id, "done"); v.Raw["result"] != "already_applied" {
			applied++
		}
	}
	// And once more after everything completed.
	if v := e.Wait(e.Enqueue(order.Spec()), "done"); v.Raw["result"] != "already_applied" {
		t.Fatalf("a late resubmission applied again: %v", v.Record)
	}
	s, err := ReadStock(bg, e.Stack.Locks(), "t1", "sku-9")
	// Concurrent duplicates collapse onto the first job while it waits; one whose request only
	// reaches Redis after that job ended starts a job of its own (until_done), which finds the
	// order applied. Either way each order is applied once.
	if err != nil || s.Reserved != 7 || s.OrdersApplied != 2 || applied != 2 || len(distinct) < 2 {
		t.Fatalf("stock %+v %v after %d applications by %d distinct jobs", s, err, applied, len(distinct))
	}
	ledger := e.RDB.LRange(bg, ledgerKey(e.Stack.Locks(), "t1", "sku-9"), 0, -1).Val()
	if len(ledger) != 2 || !strings.Contains(ledger[0]+ledger[1], `"order":"o-1"`) {
		t.Fatalf("ledger %v", ledger)
	}
}

// Bypassing the API (jobs enqueued straight through the engine, or created before orders were
// claimed), o1 for s1 and o1 for s2 still apply once between them: the second to run fails for
// good with a stable message.
func TestOrderAppliesOnceAcrossSKUsWithoutTheAPI(t *testing.T) {
	t.Parallel()
	e := start(t, tasks.Deps{})
	a := e.Enqueue(ReserveStockPayload{TenantID: "t1", OrderID: "o1", SKU: "s1", Quantity: 2}.Spec())
	b := e.Enqueue(ReserveStockPayload{TenantID: "t1", OrderID: "o1", SKU: "s2", Quantity: 5}.Spec())
	ended := map[string]string{}
	for _, id := range []string{a, b} {
		ended[id] = e.WaitEnd(id)
	}
	s1, _ := ReadStock(bg, e.Stack.Locks(), "t1", "s1")
	s2, _ := ReadStock(bg, e.Stack.Locks(), "t1", "s2")
	if applied := s1.OrdersApplied + s2.OrdersApplied; applied != 1 {
		t.Fatalf("o1 applied %d times (s1 %+v, s2 %+v; jobs %v)", applied, s1, s2, ended)
	}
	loser := b
	if s2.OrdersApplied == 1 {
		loser = a
	}
	v, _ := e.Stack.Get(bg, loser)
	if v.Raw["status"] != "failed" || v.Raw["last_error"] != "order o1 conflicts with an earlier request" || v.Raw["attempt"] != "1" {
		t.Fatalf("the conflicting job: %v", v.Record)
	}
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
		id    tasks.Identity
		job   string
		state tasks.ClaimState
		owner string
	}{
		{o.Identity(), "job-a", tasks.ClaimCreated, "job-a"},
		{o.Identity(), "job-a", tasks.ClaimSame, "job-a"},
		{o.Identity(), "job-b", tasks.ClaimSame, "job-a"},
		{other.Identity(), "job-c", tasks.ClaimConflict, "job-a"},
	}
	var c tasks.Claim
	for i, s := range steps {
		var err error
		c, err = tasks.ClaimIdentity(bg, locks, s.id, s.job, 0)
		if err != nil || c.State != s.state || c.JobID != s.owner || c.Key != "jobguard:{order:t1:o1}" {
			t.Fatalf("step %d: %+v %v", i, c, err)
		}
	}
	// A claim that reaches Redis past its caller's deadline writes nothing.
	late := ReserveStockPayload{TenantID: "t1", OrderID: "o-late", SKU: "s", Quantity: 1}
	if _, err := tasks.ClaimIdentity(bg, locks, late.Identity(), "job-l", 1); !errors.Is(err, tasks.ErrClaimExpired) {
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
	if removed, err := tasks.ReleaseIdentity(bg, locks, c, "job-b"); removed || err != nil {
		t.Fatalf("another request's release removed the claim: %v %v", removed, err)
	}
	mem := db.Client.MemoryUsage(bg, c.Key).Val()
	long := ReserveStockPayload{TenantID: strings.Repeat("t", 128), OrderID: strings.Repeat("o", 128), SKU: "s", Quantity: 1}
	if _, err := tasks.ClaimIdentity(bg, locks, long.Identity(), engine.NewJobID("x", time.Now()), 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("one order claim: %d bytes; with 128-character tenant and order ids: %d bytes (MEMORY USAGE)",
		mem, db.Client.MemoryUsage(bg, locks.Tag(long.Identity().Name)).Val())
	if removed, err := tasks.ReleaseIdentity(bg, locks, c, "job-a"); !removed || err != nil {
		t.Fatalf("the creator's release: %v %v", removed, err)
	}
	if _, err := tasks.ClaimIdentity(bg, locks, tasks.Identity{Name: "order:{x}"}, "j", 0); err == nil {
		t.Fatal("a name that would change the hash tag was accepted")
	}
}

// The payload's validation names the first invalid field.
func TestPayloadValidationNamesTheField(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 129)
	for _, tc := range []struct {
		err   error
		field string
	}{
		{ReserveStockPayload{OrderID: "o", SKU: "s", Quantity: 1}.Validate(), "tenant_id"},
		{ReserveStockPayload{TenantID: "t", OrderID: "o/1", SKU: "s", Quantity: 1}.Validate(), "order_id"},
		{ReserveStockPayload{TenantID: "t", OrderID: "o", SKU: long, Quantity: 1}.Validate(), "sku"},
		{ReserveStockPayload{TenantID: "t", OrderID: "o", SKU: "s", Quantity: 0}.Validate(), "quantity"},
		{ReserveStockPayload{TenantID: "t", OrderID: "o", SKU: "s", Quantity: MaxQuantity + 1}.Validate(), "quantity"},
	} {
		var fe *tasks.FieldError
		if !errors.As(tc.err, &fe) || fe.Field != tc.field {
			t.Errorf("got %v, want an error naming %s", tc.err, tc.field)
		}
	}
	if err := (ReserveStockPayload{TenantID: "t", OrderID: "o", SKU: "s", Quantity: MaxQuantity}).Validate(); err != nil {
		t.Errorf("valid payload rejected: %v", err)
	}
}

// The stock read model: the sku parameter validated by the task, a SKU never reserved all zeros.
func TestStockReadModel(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	s := engine.New(db.Client, engine.Config{})
	t.Cleanup(s.Close)
	stock := Task.Routes[0]
	var fe *tasks.FieldError
	if err := stock.Params["sku"](strings.Repeat("s", 129)); !errors.As(err, &fe) || fe.Field != "sku" {
		t.Errorf("long sku: %v", err)
	}
	body, err := stock.Read(bg, tasks.ReadDeps{Locks: s.Locks()}, map[string]string{"tenant": "t1", "sku": "none"})
	if st, ok := body.(Stock); err != nil || !ok || st != (Stock{TenantID: "t1", SKU: "none"}) {
		t.Errorf("stock of nothing: %#v %v", body, err)
	}
}
