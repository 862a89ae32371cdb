package tasks

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/guardstack"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
	"github.com/jobguard/jobguard/middleware"
)

func TestMain(m *testing.M) { redistest.Main(m) }

type env struct {
	t      *testing.T
	rdb    *redis.Client
	stack  *engine.Stack
	client *asynq.Client
}

// start runs every registered task type on a real asynq server and a fresh database.
func start(t *testing.T, deps Deps) env {
	db := redistest.NewDB(t)
	g := middleware.New(db.Client, middleware.Config{Concurrency: 4, LeaseTTL: 5 * time.Second})
	mux := Protect(g, deps, All())
	s := guardstack.Of(g)
	srv := asynq.NewServerFromRedisClient(db.Client, g.ServerConfig(asynq.Config{
		Concurrency: 4, Queues: map[string]int{"critical": 2, "default": 1}, Logger: testsupport.QuietAsynq{}, LogLevel: asynq.FatalLevel,
	}))
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.BeginShutdown(); srv.Shutdown(); waitHandlers(s); _ = g.Close() })
	return env{t: t, rdb: db.Client, stack: s, client: asynq.NewClientFromRedisClient(db.Client)}
}

func (e env) enqueue(spec engine.Spec) string {
	e.t.Helper()
	id, err := e.stack.Enqueue(context.Background(), e.client, spec)
	if err != nil {
		e.t.Fatal(err)
	}
	return id.JobID
}

func (e env) wait(id, status string) engine.View {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		v, err := e.stack.Get(context.Background(), id)
		if err == nil && v.Raw["status"] == status {
			return v
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("job %s not %s: %v %v", id, status, err, v.Record)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var bg = context.Background()

func TestReserveStockAppliesEachOrderOnce(t *testing.T) {
	t.Parallel()
	e := start(t, Deps{})
	order := ReserveStockPayload{TenantID: "t1", OrderID: "o-1", SKU: "sku-9", Quantity: 3}
	var ids []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ { // the same order, submitted concurrently
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := e.enqueue(order.Spec())
			mu.Lock()
			ids = append(ids, id)
			mu.Unlock()
		}()
	}
	wg.Wait()
	other := ReserveStockPayload{TenantID: "t1", OrderID: "o-2", SKU: "sku-9", Quantity: 4}
	ids = append(ids, e.enqueue(other.Spec()))
	applied, distinct := 0, map[string]bool{}
	for _, id := range ids {
		if distinct[id] {
			continue
		}
		distinct[id] = true
		if v := e.wait(id, "done"); v.Raw["result"] != "already_applied" {
			applied++
		}
	}
	// And once more after everything completed.
	if v := e.wait(e.enqueue(order.Spec()), "done"); v.Raw["result"] != "already_applied" {
		t.Fatalf("a late resubmission applied again: %v", v.Record)
	}
	s, err := ReadStock(bg, e.stack.Locks(), "t1", "sku-9")
	// Concurrent duplicates collapse onto the first job while it waits; one whose request only
	// reaches Redis after that job ended starts a job of its own (until_done), which finds the
	// order applied. Either way each order is applied once.
	if err != nil || s.Reserved != 7 || s.OrdersApplied != 2 || applied != 2 || len(distinct) < 2 {
		t.Fatalf("stock %+v %v after %d applications by %d distinct jobs", s, err, applied, len(distinct))
	}
	ledger := e.rdb.LRange(bg, ledgerKey(e.stack.Locks(), "t1", "sku-9"), 0, -1).Val()
	if len(ledger) != 2 || !strings.Contains(ledger[0]+ledger[1], `"order":"o-1"`) {
		t.Fatalf("ledger %v", ledger)
	}
}

func TestRebuildCacheLocalSource(t *testing.T) {
	t.Parallel()
	e := start(t, Deps{})
	p := RebuildCachePayload{TenantID: "t1", ResourceID: "home"}
	first := e.wait(e.enqueue(p.Spec()), "done")
	second := e.wait(e.enqueue(p.Spec()), "done")
	c, err := ReadCache(bg, e.stack.Locks(), "t1", "home")
	if err != nil || !strings.HasPrefix(c.Value, "computed:") || c.Version != 2 || c.FencingToken != 2 || c.JobID != second.Raw["job_id"] {
		t.Fatalf("entry %+v %v (first job %s)", c, err, first.Raw["job_id"])
	}
	if _, err := ReadCache(bg, e.stack.Locks(), "t1", "never"); !errors.Is(err, ErrNoEntry) {
		t.Fatalf("missing entry: %v", err)
	}
}

// Upstream answers decide the error class: 5xx is retried, 429 waits without spending an attempt,
// other 4xx fail at once.
func TestRebuildCacheUpstreamClasses(t *testing.T) {
	t.Parallel()
	var calls sync.Map
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res := r.URL.Query().Get("resource_id")
		n, _ := calls.LoadOrStore(res, new(atomic.Int32))
		call := n.(*atomic.Int32).Add(1)
		switch {
		case res == "flaky" && call == 1:
			w.WriteHeader(http.StatusServiceUnavailable)
		case res == "limited" && call == 1:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		case res == "missing":
			w.WriteHeader(http.StatusNotFound)
		default:
			fmt.Fprintf(w, "%s-v%d", res, call)
		}
	}))
	defer upstream.Close()
	e := start(t, Deps{Settings: map[string]string{SettingSourceURL: upstream.URL + "/source"}})
	flaky := e.enqueue(RebuildCachePayload{TenantID: "t", ResourceID: "flaky"}.Spec())
	limited := e.enqueue(RebuildCachePayload{TenantID: "t", ResourceID: "limited"}.Spec())
	missing := e.enqueue(RebuildCachePayload{TenantID: "t", ResourceID: "missing"}.Spec())
	if v := e.wait(flaky, "done"); v.Raw["attempt"] != "2" {
		t.Fatalf("503 then 200: %v", v.Record)
	}
	if v := e.wait(limited, "done"); v.Raw["attempt"] != "1" {
		t.Fatalf("429 then 200 spent an attempt: %v", v.Record)
	}
	if v := e.wait(missing, "failed"); v.Raw["attempt"] != "1" || !strings.Contains(v.Raw["last_error"], "404") {
		t.Fatalf("404: %v", v.Record)
	}
	if c, _ := ReadCache(bg, e.stack.Locks(), "t", "flaky"); c.Value != "flaky-v2" {
		t.Fatalf("cache %+v", c)
	}
}

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
		{RebuildCachePayload{TenantID: "t{x}", ResourceID: "r"}.Validate(), "tenant_id"},
		{RebuildCachePayload{TenantID: "t"}.Validate(), "resource_id"},
	} {
		var fe *FieldError
		if !errors.As(tc.err, &fe) || fe.Field != tc.field {
			t.Errorf("got %v, want an error naming %s", tc.err, tc.field)
		}
	}
	if err := (ReserveStockPayload{TenantID: "t", OrderID: "o", SKU: "s", Quantity: MaxQuantity}).Validate(); err != nil {
		t.Errorf("valid payload rejected: %v", err)
	}
}

// The registry alone decides which types a worker serves.
func TestRegistryDrivesHandlers(t *testing.T) {
	t.Parallel()
	e := start(t, Deps{})
	for _, task := range All() {
		if _, ok := e.stack.TaskConfig(task.Type); !ok {
			t.Errorf("%s is in the registry but not served", task.Type)
		}
	}
	if len(All()) != 2 {
		t.Fatalf("registry has %d types", len(All()))
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	if d := retryAfter("3"); d != 3*time.Second {
		t.Fatal(d)
	}
	if d := retryAfter(time.Now().Add(5 * time.Second).UTC().Format(http.TimeFormat)); d < 3*time.Second || d > 5*time.Second {
		t.Fatal(d)
	}
	if d := retryAfter("soon"); d != time.Second {
		t.Fatal(d)
	}
}
