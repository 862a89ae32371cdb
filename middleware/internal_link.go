package middleware

import (
	"context"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/guardstack"
)

// The template's HTTP API reaches the guard's engine for what the public API keeps internal.
func init() {
	guardstack.Register(func(g any) *engine.Stack { return g.(*Guard).stack })
	guardstack.RegisterJobOf(func(ctx context.Context) *engine.Job {
		if r, ok := RunFrom(ctx); ok {
			return r.job
		}
		return nil
	})
}
