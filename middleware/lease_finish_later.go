package middleware

import (
	"context"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/internal/engine"
)

// finishLeaseLater sends the finish of a run whose handler succeeded without waiting for its
// answer: asynq's answer is nil whatever the finish says (released, or superseded by a rescue's
// copy), so the handler's slot goes back to asynq one round trip sooner. That round trip was
// most of what the lease level added to a task that waits on I/O (docs/BENCHMARKS.md). The run's
// limit slot (nil: none) is released after the finish, as the waiting path does, and not waited
// for either.
//
// Nothing is weakened. The finish is queued before the handler returns, on the batcher that
// sends every start and finish in order, so a later start of the same resource in this process
// finds the lease released. A crash before the finish lands leaves the run marker and the lease
// behind, as a crash just before a finish it waited for would: the lease lapses within its TTL,
// and the rescuer only ever looks at tasks asynq still holds active. Close waits for the finishes
// on their way.
func (g *Guard) finishLeaseLater(ctx context.Context, typ string, k leaseKeys, owner string, slot *engine.Slot, log zerolog.Logger) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	g.finishing.Add(1)
	g.stack.Store().PostScript(fctx, func(cmd *redis.Cmd) {
		defer g.finishing.Done()
		defer cancel()
		fin, err := leaseFinishedOf(cmd)
		switch {
		case err != nil:
			log.Warn().Str("event", "lease_finish_failed").Err(err).Msg("lease not released after the run; it lapses within its TTL")
			g.m.outcomes.WithLabelValues(typ, "done").Inc()
		case fin.superseded:
			// A rescue handed the task to a copy while this run was lost: the copy's run counts.
			g.m.outcomes.WithLabelValues(typ, "superseded").Inc()
		default:
			g.m.outcomes.WithLabelValues(typ, "done").Inc()
		}
	}, leaseFinishScript, []string{k.lease, k.marker}, owner)
	if slot != nil {
		g.finishing.Add(1)
		slot.ReleaseLater(ctx, g.finishing.Done)
	}
}
