package engine

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// blip fails every command of the clients it hooks while it is cut: Redis away for a moment.
type blip struct{ cut atomic.Bool }

var errBlip = errors.New("blip: connection reset")

func (b *blip) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (b *blip) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if b.cut.Load() {
			cmd.SetErr(errBlip)
			return errBlip
		}
		return next(ctx, cmd)
	}
}

func (b *blip) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if b.cut.Load() {
			for _, c := range cmds {
				c.SetErr(errBlip)
			}
			return errBlip
		}
		return next(ctx, cmds)
	}
}

// cutOnEnqueue cuts b when asynq's client enqueues: the blip begins just after the rescue script
// wrote the record, so the enqueue of the new delivery and the record's put-back both fail.
type cutOnEnqueue struct{ *blip }

func (c cutOnEnqueue) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return c.blip.ProcessHook(func(ctx context.Context, cmd redis.Cmder) error {
		c.cut.Store(true)
		cmd.SetErr(errBlip)
		return errBlip
	})
}

// A rescue writes the record (retrying, delivery n+1) before it enqueues delivery n+1. When Redis
// went away in between, neither the enqueue nor the put-back (unrescue) happened: the record named
// a delivery asynq did not have, and the rescuer's next pass skipped the job (the old delivery is no
// longer the job's), leaving it to the reconciler's 30 s grace. The next pass now enqueues the
// rescue's delivery again; before the fix it rescued nothing and delivery n+1 was never enqueued.
func TestRescueWhoseEnqueueAndPutBackFailedIsFinishedByTheNextPass(t *testing.T) {
	t.Parallel()
	h, id, hang, runs := stranded(t)
	defer close(hang)
	b := &blip{}
	flaky := redis.NewClient(h.rdb.Options())
	flaky.AddHook(b)
	defer flaky.Close()
	enq := redis.NewClient(h.rdb.Options())
	enq.AddHook(cutOnEnqueue{b})
	defer enq.Close()
	clock := newFakeClock()
	other := New(flaky, Config{LeaseTTL: 2 * time.Second, WorkerID: "rescuer", Clock: clock})
	other.Register(TaskConfig{Type: "work", MaxAttempts: 3}, func(context.Context, *Job) error { return nil })
	defer other.Close()

	if n, _ := other.NewRescuer(h.insp, asynq.NewClientFromRedisClient(enq), 0).Pass(bg); n != 0 {
		t.Fatalf("a rescue whose enqueue failed counted %d", n)
	}
	b.cut.Store(false)
	v, _ := h.stack.Get(bg, id)
	if v.Raw["status"] != "retrying" || v.Raw["delivery"] != DeliveryID(id, 2) {
		t.Fatalf("the blip did not leave the record moved without its delivery: %v", v.Record)
	}
	if _, err := h.insp.GetTaskInfo("default", DeliveryID(id, 2)); !errors.Is(err, asynq.ErrTaskNotFound) {
		t.Fatalf("delivery 2 is in asynq already: %v", err)
	}

	r := other.NewRescuer(h.insp, h.client, 0)
	// At once, the half-done rescue may be another rescuer's still at work: left alone.
	if n, err := r.Pass(bg); err != nil || n != 0 {
		t.Fatalf("a pass right after the cut: %d rescued, %v; want none yet", n, err)
	}
	clock.Advance(11 * time.Second)
	if n, err := r.Pass(bg); err != nil || n != 1 {
		t.Fatalf("the next pass: %d rescued, %v; want the rescue's delivery enqueued", n, err)
	}
	v = h.waitStatus(id, "done", 15*time.Second)
	if v.Raw["deliveries"] != "2" || v.Raw["attempt"] != "2" || runs.Load() != 2 {
		t.Fatalf("after the rescue's delivery: %v, %d runs", v.Record, runs.Load())
	}
	if n, err := r.Pass(bg); err != nil || n != 0 {
		t.Fatalf("a later pass: %d rescued, %v", n, err)
	}
}
