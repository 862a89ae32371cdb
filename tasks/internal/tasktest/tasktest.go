// Package tasktest runs task types on a real asynq server and a fresh Redis database for the tests
// of the task contract and of each example task. It imports the contract only: a test hands in
// the tasks it runs.
package tasktest

import (
	"context"
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
)

// Env is a running worker: its Redis, the guard's stack and a client to enqueue with.
type Env struct {
	T      *testing.T
	RDB    *redis.Client
	Stack  *engine.Stack
	Client *asynq.Client
}

// Start runs list under a guard on a real asynq server and a fresh database, stopped at cleanup.
func Start(t *testing.T, deps tasks.Deps, list []tasks.Task) Env {
	db := redistest.NewDB(t)
	g := middleware.New(db.Client, middleware.Config{Concurrency: 4, LeaseTTL: 5 * time.Second})
	mux := tasks.Protect(g, deps, list)
	s := guardstack.Of(g)
	srv := asynq.NewServerFromRedisClient(db.Client, g.ServerConfig(asynq.Config{
		Concurrency: 4, Queues: map[string]int{"critical": 2, "default": 1}, Logger: testsupport.QuietAsynq{}, LogLevel: asynq.FatalLevel,
	}))
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.BeginShutdown(); srv.Shutdown(); WaitHandlers(s); _ = g.Close() })
	return Env{T: t, RDB: db.Client, Stack: s, Client: asynq.NewClientFromRedisClient(db.Client)}
}

// Enqueue enqueues spec through the engine and returns its job id.
func (e Env) Enqueue(spec engine.Spec) string {
	e.T.Helper()
	id, err := e.Stack.Enqueue(context.Background(), e.Client, spec)
	if err != nil {
		e.T.Fatal(err)
	}
	return id.JobID
}

// Wait waits until the job has status and returns its view.
func (e Env) Wait(id, status string) engine.View {
	e.T.Helper()
	var v engine.View
	testsupport.Eventually(e.T, 20*time.Second, "job "+id+" "+status, func() bool {
		var err error
		v, err = e.Stack.Get(context.Background(), id)
		return err == nil && v.Raw["status"] == status
	})
	return v
}

// WaitEnd waits until the job is done or failed and returns that status.
func (e Env) WaitEnd(id string) string {
	e.T.Helper()
	var status string
	testsupport.Eventually(e.T, 20*time.Second, "job "+id+" ended", func() bool {
		v, err := e.Stack.Get(context.Background(), id)
		status = v.Raw["status"]
		return err == nil && (status == "done" || status == "failed")
	})
	return status
}

// WaitHandlers waits (bounded) for handlers asynq's Shutdown gave up on, so their conclusions land
// before the stack closes, as the app does.
func WaitHandlers(s *engine.Stack) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	s.Wait(ctx)
}
