package httpapi

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// A job whose confirmation's reply was lost (engine.UnknownJob) keeps its Idempotency-Key claimed:
// the confirmation, and the answer sent with it, may still land. On one Redis node the answer is
// conditional on the confirmation (idem_complete_decided.lua), but a connection cut inside the
// pipeline can run the one without the other; on a cluster the answer goes only after the
// confirmation's reply, so it was never sent. Once the request's deadline has passed on Redis's
// clock no confirmation of it can take any more, and the job is confirmed or never will be: the
// settlement then stores the answer (a retry with the key replays it) or releases the key (a retry
// creates anew), before the claim runs out (ClaimSlack past the deadline). A Redis unreachable all
// that time leaves the key to run out, as before.

// settlements count the settlements running, which a process's shutdown waits for (API.Settle).
// Not a WaitGroup: a request still in flight when the shutdown waits may start one then.
type settlements struct {
	mu      sync.Mutex
	running int
	idle    chan struct{} // closed once running is back to 0
}

func (s *settlements) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == 0 {
		s.idle = make(chan struct{})
	}
	s.running++
}

func (s *settlements) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running--; s.running == 0 {
		close(s.idle)
	}
}

// done is closed once no settlement runs.
func (s *settlements) done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	return s.idle
}

// Settle waits until the settlements running are over, or ctx ends: a process that stops leaves
// none half done unless it cannot wait (each ends at most ClaimSlack past its request's deadline).
func (a *API) Settle(ctx context.Context) {
	select {
	case <-a.settling.done():
	case <-ctx.Done():
	}
}

// settleMargin is how long past the request's deadline the settlement reads the job: the deadline
// is checked on Redis's clock, estimated to within a few milliseconds (jobstore.SyncClock).
const settleMargin = 200 * time.Millisecond

// settleTry bounds one attempt of the settlement; settleEvery spaces the attempts.
const (
	settleTry   = 300 * time.Millisecond
	settleEvery = 100 * time.Millisecond
)

// settleUnknown settles, off the request, the answer ans of job id under claim c; ctx is the
// request's (a request without a deadline leaves its claim to run out: its confirmation could
// land as long as the job's claim lives; so does an idempotency built without its settlements).
func (s idempotency) settleUnknown(ctx context.Context, stack *engine.Stack, c *claim, ans answer, id string) {
	deadline, ok := ctx.Deadline()
	if !ok || s.settling == nil {
		return
	}
	s.settling.start()
	go func() {
		defer s.settling.end()
		time.Sleep(time.Until(deadline.Add(settleMargin)))
		for end := deadline.Add(jobstore.ClaimSlack); time.Now().Before(end); time.Sleep(settleEvery) {
			if s.settleOnce(stack, c, ans, id) == nil {
				return
			}
		}
	}()
}

// settleOnce stores ans if job id is confirmed, or releases c if it is not.
func (s idempotency) settleOnce(stack *engine.Stack, c *claim, ans answer, id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), settleTry)
	defer cancel()
	keys, err := stack.Store().Keys(id, "")
	if err != nil {
		return err
	}
	pipe := s.rdb.Pipeline()
	// On one node one script reads the record and stores the answer: nothing comes between them.
	var stored *redis.Cmd
	if _, cluster := s.rdb.(*redis.ClusterClient); cluster {
		// The record and the key live on different masters; a confirmed record stays confirmed.
		confirmed, err := stack.JobConfirmed(ctx, id)
		if err != nil {
			return err
		}
		if !confirmed {
			s.release(ctx, c)
			return nil
		}
		stored = s.keep(ctx, pipe, c, ans)
	} else {
		stored = s.complete(ctx, pipe, c, ans, keys.Record)
	}
	_, _ = pipe.Exec(ctx)
	n, err := stored.Int()
	if err != nil {
		return err
	}
	if n == 0 {
		s.release(ctx, c) // not confirmed (or the claim was lost: the release then does nothing)
	}
	return nil
}
