// Command benchpeers is make bench-peers: jobguard, bare asynq, BullMQ and River on the same
// workload, side by side (internal/benchpeers; docs/BENCHMARKS.md says how to read it).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/jobguard/jobguard/internal/benchpeers"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := benchpeers.FromEnv()
	if err == nil {
		err = benchpeers.Run(ctx, cfg, os.Stdout, os.Stderr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		stop()
		os.Exit(1)
	}
}
