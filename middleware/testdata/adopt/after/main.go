// The same application with jobguard added: nine lines added, two changed (the diff is the test's).
package main

import (
	"context"
	"log"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jobguard/jobguard/middleware"
	"github.com/redis/go-redis/v9"
)

func main() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	guard := middleware.New(rdb, middleware.Config{})
	defer guard.Close()
	guard.ProtectLease("stock:reserve", middleware.Lease{
		Resource: func(t *asynq.Task) (string, error) { return "sku:" + string(t.Payload()), nil },
	})
	go guard.Run(context.Background())
	mux := asynq.NewServeMux()
	mux.Use(logging)
	mux.Use(guard.Middleware())
	mux.HandleFunc("stock:reserve", reserve)
	mux.HandleFunc("email:send", send)
	srv := asynq.NewServerFromRedisClient(rdb, guard.ServerConfig(asynq.Config{
		Concurrency:    20,
		RetryDelayFunc: func(n int, err error, t *asynq.Task) time.Duration { return time.Duration(n+1) * time.Second },
	}))
	if err := srv.Run(mux); err != nil {
		log.Fatal(err)
	}
}

func logging(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		log.Printf("handling %s", t.Type())
		return next.ProcessTask(ctx, t)
	})
}

func reserve(ctx context.Context, t *asynq.Task) error {
	return nil // writes the reservation
}

func send(ctx context.Context, t *asynq.Task) error { return nil }
