package history

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/pgtest"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var bg = context.Background()

// bundle is a stack on a fresh Redis database with a real asynq server, and a writer copying the
// jobs it ends to a fresh PostgreSQL database.
type bundle struct {
	stack  *engine.Stack
	client *asynq.Client
	db     *pgxpool.Pool
	writer *Writer
}

// setup runs register's task types; the writer flushes every 50 ms.
func setup(t *testing.T, register func(s *engine.Stack)) bundle {
	t.Helper()
	rdb := redistest.NewDB(t).Client
	pool := pgtest.NewPool(t)
	if err := Migrate(bg, pool); err != nil {
		t.Fatal(err)
	}
	s := engine.New(rdb, engine.Config{Concurrency: 4, LeaseTTL: 2 * time.Second})
	register(s)
	w := NewWriter(pool, s, zerolog.Nop())
	w.Flush = 50 * time.Millisecond
	s.OnEnd(w.Add)
	ctx, cancel := context.WithCancel(bg)
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	cfg := s.ServerConfig(asynq.Config{Concurrency: 4, Queues: map[string]int{"default": 1},
		TaskCheckInterval: 50 * time.Millisecond, Logger: testsupport.QuietAsynq{}, LogLevel: asynq.FatalLevel})
	cfg.DelayedTaskCheckInterval = 100 * time.Millisecond
	srv := asynq.NewServerFromRedisClient(rdb, cfg)
	if err := srv.Start(s.Mux()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.BeginShutdown()
		srv.Shutdown()
		s.Close()
		cancel()
		<-done
	})
	return bundle{stack: s, client: asynq.NewClientFromRedisClient(rdb), db: pool, writer: w}
}

func (b bundle) enqueue(t *testing.T, typ string) string {
	t.Helper()
	e, err := b.stack.Enqueue(bg, b.client, engine.Spec{Type: typ, Tenant: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	return e.JobID
}

// mismatch says how the copy differs from the Redis view ("" when it does not): every record
// field, and every timeline event with its seq, in order.
func mismatch(live, copied engine.View) string {
	if !reflect.DeepEqual(live.Raw, copied.Raw) {
		return fmt.Sprintf("record: redis %v, sql %v", live.Raw, copied.Raw)
	}
	if !reflect.DeepEqual(live.Record, copied.Record) {
		return fmt.Sprintf("parsed record: redis %+v, sql %+v", live.Record, copied.Record)
	}
	if len(live.Timeline) != len(copied.Timeline) {
		return fmt.Sprintf("timeline: redis %d events %+v, sql %d %+v", len(live.Timeline), live.Timeline, len(copied.Timeline), copied.Timeline)
	}
	for i := range live.Timeline {
		if live.Timeline[i] != copied.Timeline[i] {
			return fmt.Sprintf("event %d: redis %+v, sql %+v", i, live.Timeline[i], copied.Timeline[i])
		}
	}
	return ""
}

// The SQL copy of a job that ended done, failed after its retries, or was cancelled (queued, and
// while running) has the record and timeline the Redis view has: the same fields, the same events
// in the same order with the same seq, delivery, token, attempt, worker and detail. Compared once
// the job has settled (its handler returned, its late events written) and before Redis lets go.
func TestCopiesMatchTheRedisView(t *testing.T) {
	t.Parallel()
	running := make(chan struct{}, 1)
	b := setup(t, func(s *engine.Stack) {
		s.Register(engine.TaskConfig{Type: "ok"}, func(ctx context.Context, j *engine.Job) error {
			j.SetResult("fine")
			return nil
		})
		s.Register(engine.TaskConfig{Type: "flaky", MaxAttempts: 2, Backoff: engine.Backoff{Base: time.Second, Max: time.Second}},
			func(context.Context, *engine.Job) error { return errors.New("upstream said no") })
		s.Register(engine.TaskConfig{Type: "slow"}, func(ctx context.Context, j *engine.Job) error {
			running <- struct{}{}
			<-ctx.Done()
			return context.Cause(ctx)
		})
	})
	ok, flaky, slow := b.enqueue(t, "ok"), b.enqueue(t, "flaky"), b.enqueue(t, "slow")
	queued, err := b.stack.Enqueue(bg, b.client, engine.Spec{Type: "ok", Tenant: "t1", ProcessIn: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	<-running
	for _, id := range []string{slow, queued.JobID} {
		if _, err := b.stack.Cancel(bg, id, engine.CancelRequest{By: "test", Why: "not needed"}); err != nil {
			t.Fatalf("cancel %s: %v", id, err)
		}
	}
	want := map[string]string{ok: "done", flaky: "failed", slow: "cancelled", queued.JobID: "cancelled"}
	for id, status := range want {
		if diff := settledCopy(b, id, status); diff != "" {
			t.Errorf("job %s (%s): %s", id, status, diff)
		}
	}
}

// settledCopy waits (up to 30 s) for job id to have status in Redis with no handler running and
// a copy equal to the Redis view; it answers the last difference seen, "" when they matched.
func settledCopy(b bundle, id, status string) string {
	var last string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		live, err := b.stack.Get(bg, id)
		if err != nil || live.Raw["status"] != status || b.stack.Running() > 0 {
			last = fmt.Sprintf("redis: %v %v", err, live.Raw)
			continue
		}
		copied, err := Load(bg, b.db, id)
		if err != nil {
			last = fmt.Sprintf("sql: %v", err)
			continue
		}
		if last = mismatch(live, copied); last == "" {
			return ""
		}
	}
	return last
}
