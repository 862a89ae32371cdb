// Command jobguard runs the HTTP API and UI (jobguard api), an asynq worker (jobguard worker), or
// both in one process (jobguard); jobguard help lists the subcommands and variables. Configuration
// comes from the environment; see the README.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/jobguard/jobguard/app"
	"github.com/jobguard/jobguard/tasks/registry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := app.Main(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr, registry.All())
	stop()
	os.Exit(code)
}
