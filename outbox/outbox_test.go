package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
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

// bundle is a worker (engine, asynq server), a PostgreSQL with the outbox, and the runs of the
// test task type by job id.
type bundle struct {
	pool   *pgxpool.Pool
	stack  *engine.Stack
	client *asynq.Client
	mu     sync.Mutex
	runs   map[string]int
}

func setup(t *testing.T) *bundle {
	t.Helper()
	pool := pgtest.NewPool(t)
	if err := Migrate(bg, pool); err != nil {
		t.Fatal(err)
	}
	db := redistest.NewDB(t)
	b := &bundle{pool: pool, runs: map[string]int{}}
	b.stack = engine.New(db.Client, engine.Config{Concurrency: 4, LeaseTTL: 5 * time.Second})
	b.stack.Register(engine.TaskConfig{Type: "mail"}, func(ctx context.Context, j *engine.Job) error {
		b.mu.Lock()
		b.runs[j.ID]++
		b.mu.Unlock()
		return nil
	})
	srv := asynq.NewServerFromRedisClient(db.Client, b.stack.ServerConfig(asynq.Config{
		Concurrency: 4, Logger: testsupport.QuietAsynq{}, LogLevel: asynq.FatalLevel, TaskCheckInterval: 50 * time.Millisecond,
	}))
	if err := srv.Start(b.stack.Mux()); err != nil {
		t.Fatal(err)
	}
	b.client = asynq.NewClientFromRedisClient(db.Client)
	t.Cleanup(func() { srv.Shutdown(); b.stack.Close() })
	return b
}

func (b *bundle) relay() *Relay {
	return &Relay{DB: b.pool, Stack: b.stack, Client: b.client, PollInterval: 100 * time.Millisecond, LeaseTTL: 2 * time.Second, Log: zerolog.Nop()}
}

// start runs a relay until the test ends.
func (b *bundle) start(t *testing.T) {
	ctx, cancel := context.WithCancel(bg)
	done := make(chan struct{})
	go func() { defer close(done); b.relay().Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func (b *bundle) ran(id string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.runs[id]
}

func (b *bundle) pending(t *testing.T) int {
	var n int
	if err := b.pool.QueryRow(bg, "SELECT count(*) FROM jobguard_outbox").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// record enqueues a job in a transaction that commits (or not).
func (b *bundle) record(t *testing.T, commit bool, resource string) string {
	t.Helper()
	tx, err := b.pool.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	id, err := EnqueueTx(bg, tx, engine.Spec{Type: "mail", Resource: resource, Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if commit {
		err = tx.Commit(bg)
	} else {
		err = tx.Rollback(bg)
	}
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// A job recorded in a committed transaction runs once, woken by NOTIFY; one whose transaction
// rolled back never exists.
func TestCommittedJobsRunRolledBackNever(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.start(t)
	kept := b.record(t, true, "user:1")
	dropped := b.record(t, false, "user:2")
	testsupport.Eventually(t, 10*time.Second, "the committed job ran", func() bool { return b.ran(kept) == 1 })
	testsupport.Eventually(t, 5*time.Second, "the outbox is empty", func() bool { return b.pending(t) == 0 })
	if _, err := b.stack.Get(bg, dropped); err == nil || b.ran(dropped) != 0 {
		t.Fatalf("the rolled-back job exists: %v, ran %d", err, b.ran(dropped))
	}
}

// A relay that enqueued a job and died before deleting its row, and two relays racing: each job
// is created and run once.
func TestRelayingTwiceCreatesOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ids []string
	for i := range 20 {
		ids = append(ids, b.record(t, true, fmt.Sprint("user:", i)))
	}
	// The dead relay's half: the first job enqueued, its row left.
	var sp spec
	var raw []byte
	if err := b.pool.QueryRow(bg, "SELECT spec FROM jobguard_outbox ORDER BY id LIMIT 1").Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &sp); err != nil {
		t.Fatal(err)
	}
	if _, err := b.stack.Enqueue(bg, b.client, sp.engineSpec()); err != nil {
		t.Fatal(err)
	}
	var passes sync.WaitGroup
	var relayed atomic.Int64
	for range 2 {
		passes.Add(1)
		go func() {
			defer passes.Done()
			n, err := b.relay().Pass(bg)
			if err != nil {
				t.Error(err)
			}
			relayed.Add(int64(n))
		}()
	}
	passes.Wait()
	testsupport.Eventually(t, 10*time.Second, "every job ran", func() bool {
		for _, id := range ids {
			if b.ran(id) == 0 {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		if n := b.ran(id); n != 1 {
			t.Errorf("job %s ran %d times", id, n)
		}
	}
	if relayed.Load() != 20 || b.pending(t) != 0 {
		t.Fatalf("relayed %d, left %d", relayed.Load(), b.pending(t))
	}
}

// A row whose job can never be enqueued (its type is not registered) is set aside with its error,
// and the rows after it are relayed.
func TestARowThatCannotBeEnqueuedIsSetAside(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tx, err := b.pool.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := EnqueueTx(bg, tx, engine.Spec{Type: "gone", Resource: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(bg); err != nil {
		t.Fatal(err)
	}
	after := b.record(t, true, "user:after")
	n, err := b.relay().Pass(bg)
	if err != nil || n != 1 {
		t.Fatalf("pass: %d %v", n, err)
	}
	testsupport.Eventually(t, 10*time.Second, "the next job ran", func() bool { return b.ran(after) == 1 })
	var dead int
	var why string
	if err := b.pool.QueryRow(bg, "SELECT count(*), max(last_error) FROM jobguard_outbox WHERE dead_at IS NOT NULL").Scan(&dead, &why); err != nil || dead != 1 || why == "" {
		t.Fatalf("set aside: %d %q %v", dead, why, err)
	}
}
