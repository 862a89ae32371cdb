package middleware_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/middleware"
)

// bundle is one test's Redis database, guard and asynq client.
type bundle struct {
	rdb    *redis.Client
	guard  *middleware.Guard
	client *asynq.Client
	insp   *asynq.Inspector
}

func setup(t *testing.T, cfg middleware.Config) *bundle {
	t.Helper()
	db := redistest.NewDB(t)
	if cfg.Prefix == "" {
		cfg.Prefix = "t"
	}
	b := &bundle{rdb: db.Client, guard: middleware.New(db.Client, cfg),
		client: asynq.NewClientFromRedisClient(db.Client), insp: asynq.NewInspectorFromRedisClient(db.Client)}
	t.Cleanup(func() { _ = b.guard.Close() })
	return b
}

// serve starts an asynq server on the bundle's database with the guard's middleware and handlers
// (by type); it stops when the test ends.
func (b *bundle) serve(t *testing.T, cfg asynq.Config, handlers map[string]asynq.HandlerFunc) {
	t.Helper()
	b.serveWith(t, b.guard, cfg, handlers)
}

// serveWith is serve with guard g (another process's guard on the bundle's database, say).
func (b *bundle) serveWith(t *testing.T, g *middleware.Guard, cfg asynq.Config, handlers map[string]asynq.HandlerFunc) {
	t.Helper()
	mux := asynq.NewServeMux()
	mux.Use(g.Middleware())
	for typ, h := range handlers {
		mux.Handle(typ, h)
	}
	cfg.LogLevel = asynq.FatalLevel
	srv := asynq.NewServerFromRedisClient(b.rdb, g.ServerConfig(cfg))
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
}

// eventually polls cond until it holds or within passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (b *bundle) completed(t *testing.T, queue string) int {
	t.Helper()
	qi, err := b.insp.GetQueueInfo(queue)
	if err != nil {
		return 0
	}
	return qi.Processed - qi.Failed
}

var ctx = context.Background()
