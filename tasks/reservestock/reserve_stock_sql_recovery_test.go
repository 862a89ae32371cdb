package reservestock

import (
	"context"
	"errors"
	"strings"
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
	"github.com/jobguard/jobguard/tasks"
	"github.com/jobguard/jobguard/tasks/internal/tasktest"
)

// sqlWorker is one worker process of reserve-stock in SQL mode on rdb: a stack (lease TTL 2 s)
// running task on its own asynq server, stopped at the test's end.
type sqlWorker struct {
	stack *engine.Stack
	srv   *asynq.Server
}

func startSQLWorker(t *testing.T, rdb *redis.Client, deps tasks.Deps, id string, task tasks.Task) sqlWorker {
	t.Helper()
	g := middleware.New(rdb, middleware.Config{Concurrency: 2, LeaseTTL: 2 * time.Second, WorkerID: id})
	mux := tasks.Protect(g, deps, []tasks.Task{task})
	s := guardstack.Of(g)
	srv := asynq.NewServerFromRedisClient(rdb, g.ServerConfig(asynq.Config{
		Concurrency: 2, Queues: map[string]int{"critical": 1}, Logger: testsupport.QuietAsynq{}, LogLevel: asynq.FatalLevel,
	}))
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.BeginShutdown(); srv.Shutdown(); tasktest.WaitHandlers(s); _ = g.Close() })
	return sqlWorker{stack: s, srv: srv}
}

// waitStatus polls the job's record in Redis until it has status.
func waitStatus(t *testing.T, s *engine.Stack, id, status string) engine.View {
	t.Helper()
	var v engine.View
	testsupport.Eventually(t, 30*time.Second, "job "+id+" "+status, func() bool {
		var err error
		v, err = s.Get(bg, id)
		return err == nil && v.Raw["status"] == status
	})
	return v
}

// assertAppliedOnce checks that SQL holds the order once and its quantity once.
func assertAppliedOnce(t *testing.T, deps tasks.Deps, p ReserveStockPayload) {
	t.Helper()
	s, err := readStockSQL(bg, deps.SQL, p.TenantID, p.SKU)
	if err != nil || s.Reserved != int64(p.Quantity) || s.OrdersApplied != 1 {
		t.Fatalf("stock %+v %v, want reserved %d by 1 order", s, err, p.Quantity)
	}
	var rows int
	if err := deps.SQL.QueryRow(bg, "SELECT count(*) FROM reserve_stock_orders WHERE tenant = $1 AND order_id = $2",
		p.TenantID, p.OrderID).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("order rows %d %v", rows, err)
	}
}

// A run that commits its SQL transaction and whose worker then dies before the Redis finish (the
// handler never returns, its lease lapses, its heartbeat is old: what kill -9 leaves) is rescued
// by another worker; the new delivery finds the order in SQL and ends already_applied, and SQL
// shows the order and its quantity once.
func TestReserveStockInSQLAppliesOnceWhenRescued(t *testing.T) {
	t.Parallel()
	deps := sqlDeps(t)
	db := redistest.NewDB(t)
	committed, hang := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	dying := Task
	dying.Handler = func(d tasks.Deps) asynq.Handler {
		h := Task.Handler(d)
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			err := h.ProcessTask(ctx, t)
			if runs.Add(1) == 1 {
				close(committed)
				<-hang // ignores its context, like a process that is gone: no finish reaches Redis
			}
			return err
		})
	}
	a := startSQLWorker(t, db.Client, deps, "dying", dying)
	t.Cleanup(func() { close(hang) }) // runs before a's shutdown, which waits for the handler
	p := ReserveStockPayload{TenantID: "t1", OrderID: "o-rescued", SKU: "s1", Quantity: 5}
	enq, err := a.stack.Enqueue(bg, asynq.NewClientFromRedisClient(db.Client), p.Spec())
	if err != nil {
		t.Fatal(err)
	}
	id := enq.JobID
	select {
	case <-committed:
	case <-time.After(30 * time.Second):
		t.Fatal("the first run did not commit")
	}
	assertAppliedOnce(t, deps, p)
	// The worker is gone: it pulls nothing more, renews nothing, and its lease and heartbeat lapse.
	a.srv.Stop()
	a.stack.Close()
	tag := engine.ResourceTag(p.Resource())
	db.Client.Del(bg, a.stack.Locks().LeaseKey(tag))
	db.Client.HSet(bg, a.stack.Locks().Key(tag, "job:"+id), "heartbeat_at", time.Now().Add(-3*time.Second).UnixMilli())

	b := startSQLWorker(t, db.Client, deps, "rescuer", Task)
	n, err := b.stack.NewRescuer(asynq.NewInspectorFromRedisClient(db.Client), asynq.NewClientFromRedisClient(db.Client), 0).Pass(bg)
	if err != nil || n != 1 {
		t.Fatalf("rescue pass: %d %v", n, err)
	}
	v := waitStatus(t, b.stack, id, "done")
	if v.Raw["result"] != "already_applied" || v.Raw["deliveries"] != "2" || !strings.Contains(strings.Join(timeline(v), " "), "rescued") {
		t.Fatalf("after the rescue: %v %v", v.Raw, timeline(v))
	}
	assertAppliedOnce(t, deps, p)
}

// errFinishLost is the fault failFinish injects: the finish script never reached Redis.
var errFinishLost = errors.New("test: finish lost on the way to Redis")

// failFinish fails the first finish script of job id that would write done, before it is sent
// (a connection lost after the SQL commit); everything else goes through.
type failFinish struct {
	id    string
	fired atomic.Bool
}

func (f *failFinish) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f *failFinish) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if f.match(cmd) {
			cmd.SetErr(errFinishLost)
			return errFinishLost
		}
		return next(ctx, cmd)
	}
}

func (f *failFinish) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if f.match(cmd) {
				for _, c := range cmds {
					c.SetErr(errFinishLost)
				}
				return errFinishLost
			}
		}
		return next(ctx, cmds)
	}
}

// match: an EVALSHA/EVAL of the finish script (5 keys, KEYS[1] the job's record, ARGV[3] done),
// the first time only.
func (f *failFinish) match(cmd redis.Cmder) bool {
	a := cmd.Args()
	if len(a) < 11 || (cmd.Name() != "evalsha" && cmd.Name() != "eval") {
		return false
	}
	rec, _ := a[3].(string)
	outcome, _ := a[10].(string)
	return strings.HasSuffix(rec, ":job:"+f.id) && outcome == "done" && f.fired.CompareAndSwap(false, true)
}

// A run that commits its SQL transaction and whose finish is lost on the way to Redis: the same
// delivery runs again (asynq's retry of the bounced delivery) and ends already_applied; SQL shows
// the order and its quantity once.
func TestReserveStockInSQLAppliesOnceWhenTheFinishIsLost(t *testing.T) {
	t.Parallel()
	deps := sqlDeps(t)
	db := redistest.NewDB(t)
	w := startSQLWorker(t, db.Client, deps, "w", Task)
	client := asynq.NewClientFromRedisClient(db.Client)
	p := ReserveStockPayload{TenantID: "t1", OrderID: "o-lost", SKU: "s2", Quantity: 7}
	spec := p.Spec()
	spec.JobID = engine.NewJobID(spec.Resource, time.Now())
	fault := &failFinish{id: spec.JobID}
	db.Client.AddHook(fault)
	enq, err := w.stack.Enqueue(bg, client, spec)
	if err != nil {
		t.Fatal(err)
	}
	v := waitStatus(t, w.stack, enq.JobID, "done")
	if !fault.fired.Load() || v.Raw["result"] != "already_applied" || v.Raw["deliveries"] != "1" {
		t.Fatalf("finish lost %v, then: %v %v", fault.fired.Load(), v.Raw, timeline(v))
	}
	assertAppliedOnce(t, deps, p)
}
