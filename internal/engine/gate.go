package engine

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// A caller's checks before an enqueue (the API's rate limit and Idempotency-Key claim) live in
// other slots than the job, so they cannot be one script with the create. Sent one after the
// other they cost a round trip each; sent in the create's pipeline (Spec.Alongside) they cost
// none, but the create runs whatever they find. So the create is speculative until the caller's
// gate has read their answers:
//   - Only Created wrote anything (an unconfirmed record, its timeline, a new marker and its
//     pending flag). A gate that refuses abandons it, as a refused asynq enqueue does.
//   - Duplicate, ReplaceExisting and PendingExisting wrote nothing; what they lead to (the
//     duplicate's timeline event, the replace, the wait for a pending job) happens only after
//     the gate passed.
//   - Nobody else is handed the speculative job: until its confirmation its pending flag makes
//     every duplicate's create answer PendingExisting, and such a duplicate waits for the
//     confirmation (pending.lua), finds the job abandoned ("gone") and creates its own. A
//     delivery of it cannot exist: the first is enqueued only after the gate passed.
//   - What an abandon misses (its round trip failed) is a claim that runs out at the request's
//     deadline plus ClaimSlack, as for any request that gives up.

// createGated is the first create of Enqueue, sent in one pipeline with the commands alongside
// queues, then judged by their gate: a gate error abandons a job the create made and is returned
// as it is.
func (s *Stack) createGated(ctx context.Context, keys jobstore.Keys, j jobstore.NewJob, alongside func(context.Context, redis.Pipeliner) func() error) (jobstore.CreateState, string, error) {
	var gate func() error
	state, existing, err := s.store.CreateWith(ctx, keys, j, func(pipe redis.Pipeliner) { gate = alongside(ctx, pipe) })
	if gate != nil {
		if gerr := gate(); gerr != nil {
			if err == nil && state == jobstore.Created {
				s.abandon(ctx, keys, j.ID)
			}
			return "", "", gerr
		}
	}
	return createAnswer(j.ID, state, existing, err)
}
