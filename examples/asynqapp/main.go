// Command asynqapp is an asynq application as a team already runs one: its own server, mux,
// logging middleware, retry policy and producers that call client.Enqueue. jobguard is added in
// the lines marked "jobguard": one guard, two protected types, one middleware, the server config
// chained, and the guard's background loops. Run a worker with
//
//	REDIS_URL=redis://localhost:6379/0 go run ./examples/asynqapp
//
// and enqueue with any asynq client (see produce in tasks.go).
package main

import (
	"context"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

func main() {
	log := zerolog.New(os.Stderr).With().Timestamp().Logger()
	opt, err := redis.ParseURL(os.Getenv("REDIS_URL"))
	if err != nil {
		log.Fatal().Msg("REDIS_URL is not a redis:// URL")
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	a := newApp(rdb, log, envDuration("LEASE_TTL", 0), envDuration("WORK_TIME", 0))
	defer a.guard.Close()
	srv := asynq.NewServerFromRedisClient(rdb, a.serverConfig(envInt("CONCURRENCY", 10)))
	if err := srv.Start(a.mux()); err != nil {
		log.Fatal().Err(err).Msg("asynq server did not start")
	}
	go a.guard.Run(ctx) // jobguard: rescuers, sweep, reconciler
	log.Info().Int("pid", os.Getpid()).Msg("asynqapp started")
	<-ctx.Done()
	srv.Shutdown()
}

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return d
	}
	return def
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}
