package httpapi

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// On a Redis Cluster a job's Idempotency-Key answer is stored only after its confirmation's
// reply (the key's slot is on another master), so a lost reply leaves no answer at all. The
// settlement reads the record once the request's deadline has passed: a confirmation that ran
// gets its answer stored and a retry with the key replays the job; one that never reached Redis
// has its key released and a retry creates the job. Every answer reaches Redis late, as on a
// loaded machine: the settlement of a job that stands must store its answer all the same.
func TestAJobsUnknownOutcomeIsSettledOnACluster(t *testing.T) {
	t.Parallel()
	cl := redistest.NewCluster(t)
	lost := &confirmationReplyLost{}
	r := startAppWith(t, RoleAPI, map[string]string{"REDIS_URL": cl.Cluster.URL(), "REDIS_MODE": "cluster", "KEY_PREFIX": cl.Prefix,
		"API_TOKENS": twoTenants["API_TOKENS"], "REQUEST_TIMEOUT": "3s"}, func(a Process) { a.Redis().AddHook(lost) })
	for _, c := range []struct {
		ran      bool
		replayed string
	}{{true, "true"}, {false, ""}} {
		h := append(bearer(tokenA), "Idempotency-Key", fmt.Sprintf(`"cluster-lost-%v"`, c.ran))
		body := fmt.Sprintf(`{"tenant_id":"t1","resource_id":"cluster-lost-%v"}`, c.ran)
		lost.ran.Store(c.ran)
		lost.armed.Store(true)
		resp, out := unknownThenSettled(t, r, body, h, &lost.armed, fmt.Sprintf("confirmation ran %v, its reply lost", c.ran))
		if resp.StatusCode != 202 || resp.Header.Get("Idempotent-Replayed") != c.replayed {
			t.Fatalf("confirmation ran %v, retried with the key: %d %s (replayed %q), want 202 replayed %q",
				c.ran, resp.StatusCode, out, resp.Header.Get("Idempotent-Replayed"), c.replayed)
		}
	}
}

// confirmationReplyLost loses, once armed, the reply of the pipeline that confirms a job: after
// sending it when ran is set, without sending it otherwise. It holds every pipeline that stores an
// Idempotency-Key's answer for answerLate first.
type confirmationReplyLost struct {
	testsupport.PipelinesOnly
	armed, ran atomic.Bool
}

func (h *confirmationReplyLost) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, storesAnAnswer) {
			time.Sleep(answerLate)
		}
		if !slices.ContainsFunc(cmds, confirmsAJob) || !h.armed.CompareAndSwap(true, false) {
			return next(ctx, cmds)
		}
		if h.ran.Load() {
			_ = next(ctx, cmds)
		}
		for _, c := range cmds {
			c.SetErr(errReplyLost)
		}
		return errReplyLost
	}
}

// answerLate is longer than the settlement's attempt leaves past its own deadline (settleTry less
// jobstore.DeadlineMargin): an answer stored under that deadline would be refused.
const answerLate = 150 * time.Millisecond

// confirmsAJob tells the job's confirmation: EVAL of confirm.lua, whose text opens with its name.
func confirmsAJob(c redis.Cmder) bool {
	args := c.Args()
	return c.Name() == "eval" && len(args) > 1 && strings.Contains(fmt.Sprint(args[1]), "-- confirm:")
}
