package cmdreplay

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sent is one step to send: each command's arguments.
type Sent [][]any

// Load is how a replay drives the server.
type Load struct {
	// Connections send at once, each its own batch of jobs.
	Connections int
	// Batch is how many jobs a connection replays side by side: step k of each in one pipeline.
	Batch int
	// For is how long the load runs; jobs that started complete after it.
	For time.Duration
	// Job is the steps of job n replayed by connection conn (each connection has its own queue).
	Job func(n, conn int) []Sent
	// Background is sent in a loop beside the jobs, spread evenly over BackgroundPeriod (the
	// background of one process over that period), BackgroundCopies times (that many processes).
	Background       []Sent
	BackgroundPeriod time.Duration
	BackgroundCopies int
}

// Result is what a replay did.
type Result struct {
	Jobs, Commands int64
	// Failures are commands that answered an error (the recorded run's did not).
	Failures int64
	Elapsed  time.Duration
	// FirstFailure is the first error answered, for the report.
	FirstFailure error
}

// Replay runs the load on rdb (a client with at least Connections+1 connections).
func Replay(ctx context.Context, rdb *redis.Client, l Load) Result {
	var jobs, commands, failures atomic.Int64
	var first error
	var mu sync.Mutex
	fail := func(err error) {
		failures.Add(1)
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
	}
	bgCtx, stopBackground := context.WithCancel(ctx)
	var bg sync.WaitGroup
	if len(l.Background) > 0 && l.BackgroundCopies > 0 {
		bg.Go(func() { background(bgCtx, rdb, l, &commands, fail) })
	}
	start := time.Now()
	deadline := start.Add(l.For)
	var next atomic.Int64
	var wg sync.WaitGroup
	for conn := range l.Connections {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				batch := make([][]Sent, l.Batch)
				for i := range batch {
					batch[i] = l.Job(int(next.Add(1)), conn)
				}
				for k := range batch[0] {
					pipe := rdb.Pipeline()
					for _, job := range batch {
						for _, args := range job[k] {
							pipe.Do(ctx, args...)
						}
					}
					cmds, _ := pipe.Exec(ctx)
					commands.Add(int64(len(cmds)))
					for _, c := range cmds {
						if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
							fail(err)
						}
					}
				}
				jobs.Add(int64(l.Batch))
			}
		})
	}
	wg.Wait()
	if l.Connections == 0 {
		<-time.After(time.Until(deadline)) // the background alone
	}
	elapsed := time.Since(start)
	stopBackground()
	bg.Wait()
	return Result{Jobs: jobs.Load(), Commands: commands.Load(), Failures: failures.Load(), Elapsed: elapsed, FirstFailure: first}
}

// background sends l.Background's steps BackgroundCopies times per BackgroundPeriod, evenly
// spaced, until ctx ends. A late tick (a starved process) sends every step that fell due since,
// so the rate holds.
func background(ctx context.Context, rdb *redis.Client, l Load, commands *atomic.Int64, fail func(error)) {
	n := len(l.Background) * l.BackgroundCopies
	every := l.BackgroundPeriod / time.Duration(n)
	tick := time.NewTicker(every)
	defer tick.Stop()
	start := time.Now()
	for sent := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for due := int(time.Since(start) / every); sent < due; sent++ {
			step := l.Background[sent%len(l.Background)]
			pipe := rdb.Pipeline()
			for _, args := range step {
				pipe.Do(ctx, args...)
			}
			cmds, _ := pipe.Exec(ctx)
			commands.Add(int64(len(cmds)))
			for _, c := range cmds {
				if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) && ctx.Err() == nil {
					fail(err)
				}
			}
		}
	}
}
