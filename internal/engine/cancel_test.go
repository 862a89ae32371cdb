package engine

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	dto "github.com/prometheus/client_model/go"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/locking"
)

func cancelledCount(t *testing.T, s *Stack, typ string) float64 {
	t.Helper()
	var m dto.Metric
	if err := s.m.transitions.WithLabelValues(typ, "cancelled").Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func eventOf(v View, name string) (Event, bool) {
	for _, e := range v.Timeline {
		if e.Event == name {
			return e, true
		}
	}
	return Event{}, false
}

// A scheduled job cancelled before its delivery never runs, its delivery is gone from asynq, the
// cancel is on the timeline with who and why, and counted.
func TestCancelQueuedJob(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "later"}, func(ctx context.Context, j *Job) error { runs.Add(1); return nil })
	})
	id := h.enqueue(Spec{Type: "later", Tenant: "t1", ProcessIn: time.Minute})
	res, err := h.stack.Cancel(bg, id, CancelRequest{By: "tenant t1", Why: "changed my mind"})
	if err != nil {
		t.Fatal(err)
	}
	if res.From != jobstore.StatusQueued || !res.DeliveryDeleted || res.Fence != 0 {
		t.Fatalf("cancel answered %+v, want from queued with its delivery deleted and no fence", res)
	}
	if _, err := h.insp.GetTaskInfo("default", res.Delivery); !errors.Is(err, asynq.ErrTaskNotFound) {
		t.Fatalf("delivery %s still in asynq: %v", res.Delivery, err)
	}
	v, _ := h.stack.Get(bg, id)
	e, ok := eventOf(v, "cancelled")
	if v.Record.Status != jobstore.StatusCancelled || v.Record.FinishedAt.IsZero() || !ok ||
		!strings.Contains(e.Detail, "tenant t1") || !strings.Contains(e.Detail, "changed my mind") {
		t.Fatalf("record %+v, cancelled event %+v", v.Record, e)
	}
	if n := cancelledCount(t, h.stack, "later"); n != 1 {
		t.Fatalf("cancelled transitions = %v, want 1", n)
	}
	if runs.Load() != 0 {
		t.Fatal("a cancelled job ran")
	}
}

// A delivery the cancel could not delete (here: the store's cancel alone, as when asynq had moved
// it) is acknowledged without running when it arrives.
func TestCancelledDeliveryIsAcknowledged(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "soon"}, func(ctx context.Context, j *Job) error { runs.Add(1); return nil })
	})
	id := h.enqueue(Spec{Type: "soon", ProcessIn: time.Second})
	keys, _ := h.stack.store.Keys(id, "")
	if res, err := h.stack.store.Cancel(bg, keys, jobstore.CancelArgs{Now: time.Now(), By: "test"}); err != nil || res.State != jobstore.Cancelled {
		t.Fatalf("store cancel: %+v %v", res, err)
	}
	eventually(t, 10*time.Second, "the delivery to be acknowledged", func() bool { return h.stack.Stats.StaleDeliveries.Load() == 1 })
	if runs.Load() != 0 {
		t.Fatal("a cancelled job ran")
	}
	h.waitStatus(id, "cancelled", time.Second)
}

// A retrying job is cancelled: its retry is deleted from asynq and it never runs again; a second
// cancel answers ErrEnded.
func TestCancelRetryingJob(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "flaky", Backoff: Backoff{Base: time.Hour, Max: time.Hour}}, func(ctx context.Context, j *Job) error {
			runs.Add(1)
			return errors.New("upstream down")
		})
	})
	id := h.enqueue(Spec{Type: "flaky"})
	v := h.waitStatus(id, "retrying", 10*time.Second)
	eventually(t, 10*time.Second, "asynq to hold the retry", func() bool {
		info, err := h.insp.GetTaskInfo("default", v.Record.Delivery)
		return err == nil && info.State == asynq.TaskStateRetry
	})
	res, err := h.stack.Cancel(bg, id, CancelRequest{By: "operator"})
	if err != nil || res.From != jobstore.StatusRetrying || !res.DeliveryDeleted {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	if _, err := h.insp.GetTaskInfo("default", v.Record.Delivery); !errors.Is(err, asynq.ErrTaskNotFound) {
		t.Fatalf("retry still in asynq: %v", err)
	}
	if _, err := h.stack.Cancel(bg, id, CancelRequest{By: "operator"}); !errors.Is(err, ErrEnded) {
		t.Fatalf("second cancel: %v, want ErrEnded", err)
	}
	if runs.Load() != 1 {
		t.Fatalf("runs = %d, want 1", runs.Load())
	}
}

// A running job whose handler ignores its context: the cancel answers at once, the handler's
// context ends with ErrCancelled (the keeper's renewal, at a third of the lease TTL, learns of it;
// a lapsed lease would be ErrLeaseLost), and everything the
// handler writes afterwards is refused by the fence, to the record and to targets of its own that no
// run wrote before (the resource's fence counter moved past its token); its finish is stale and the
// job stays cancelled. Its dedup marker is released, so the same request makes a new job.
func TestCancelRunningJobFencesLateWrites(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second
	started, release := make(chan struct{}), make(chan struct{})
	type late struct {
		checkpoint, hset, own, value error
		ownKeys                      []string
	}
	noticed := make(chan error, 1)
	got := make(chan late, 1)
	var runs atomic.Int32
	h := newHarness(t, Config{LeaseTTL: ttl}, func(s *Stack) {
		s.Register(TaskConfig{Type: "stubborn"}, func(ctx context.Context, j *Job) error {
			if runs.Add(1) > 1 {
				return nil
			}
			close(started)
			<-ctx.Done()
			noticed <- context.Cause(ctx)
			<-release // ignores the cancel, then writes as if nothing happened
			var l late
			l.checkpoint = j.SaveCheckpoint(context.Background(), []byte("late"))
			l.hset = j.Locks().SetFields(context.Background(), j.Fence(), j.keys.Record, time.Hour, jobstore.FieldResult, "late")
			l.own = j.Locks().SetFields(context.Background(), j.Fence(), j.Key("state"), time.Hour, "by", "cancelled run")
			l.value = j.Locks().SetValue(context.Background(), j.Fence(), j.Key("value"), "late", time.Hour)
			l.ownKeys = []string{j.Key("state"), j.Key("value"), locking.FenceRecordKey(j.Key("value"))}
			got <- l
			return nil
		})
	})
	spec := Spec{Type: "stubborn", Resource: "acct-1", Dedup: &Dedup{Policy: UntilDone, Key: "acct-1-sync"}}
	id := h.enqueue(spec)
	<-started
	running := h.waitStatus(id, "processing", 5*time.Second)
	asked := time.Now()
	res, err := h.stack.Cancel(bg, id, CancelRequest{By: "operator", Why: "wrong account"})
	if err != nil || res.From != jobstore.StatusProcessing || res.Fence <= running.Record.FencingToken {
		t.Fatalf("cancel: %+v %v (run's token %d)", res, err, running.Record.FencingToken)
	}
	select {
	case cause := <-noticed:
		if !errors.Is(cause, ErrCancelled) || errors.Is(cause, locking.ErrLeaseLost) {
			t.Fatalf("handler's cause = %v, want ErrCancelled (from the renewal, not a lapsed lease)", cause)
		}
	case <-time.After(30 * time.Second): // generous: a loaded machine (load 15-22) took over 1 s
		t.Fatal("the handler's context was not cancelled")
	}
	t.Logf("handler's context cancelled %s after the cancel answered", time.Since(asked))
	close(release)
	l := <-got
	if !errors.Is(l.checkpoint, locking.ErrStaleToken) || !errors.Is(l.hset, locking.ErrStaleToken) {
		t.Fatalf("late writes: checkpoint %v, SetFields %v; want both refused as stale", l.checkpoint, l.hset)
	}
	// Without the counter in the fence, these two landed: their targets' records had no token yet.
	if !errors.Is(l.own, locking.ErrStaleToken) || !errors.Is(l.value, locking.ErrStaleToken) {
		t.Fatalf("late writes to the handler's own targets: SetFields %v, SetValue %v; want both refused as stale", l.own, l.value)
	}
	if n := h.stack.rdb.Exists(bg, l.ownKeys...).Val(); n != 0 {
		t.Fatalf("%d of the handler's own targets exist after its late writes", n)
	}
	eventually(t, 5*time.Second, "the late finish to be refused", func() bool {
		v, _ := h.stack.Get(bg, id)
		return has(v, "stale_write_rejected")
	})
	v, _ := h.stack.Get(bg, id)
	if v.Record.Status != jobstore.StatusCancelled || v.Raw[jobstore.FieldCheckpoint] != "" || v.Record.Result != "" {
		t.Fatalf("after the late writes: status %s, checkpoint %q, result %q", v.Record.Status, v.Raw[jobstore.FieldCheckpoint], v.Record.Result)
	}
	if has(v, "done") {
		t.Fatalf("timeline says done: %v", events(v))
	}
	// The marker named the cancelled job and is gone: the same request is a new job.
	again, err := h.stack.Enqueue(bg, h.client, spec)
	if err != nil || again.Deduplicated || again.JobID == id {
		t.Fatalf("re-enqueue after cancel: %+v %v", again, err)
	}
	h.waitStatus(again.JobID, "done", 10*time.Second)
}

// A cancel racing the run's finish: exactly one wins, and the timeline says which.
func TestCancelRacesFinish(t *testing.T) {
	t.Parallel()
	const n = 8
	var mu sync.Mutex
	gates := map[string]chan struct{}{}
	running := make(chan string, n)
	h := newHarness(t, Config{Concurrency: n}, func(s *Stack) {
		s.Register(TaskConfig{Type: "race"}, func(ctx context.Context, j *Job) error {
			mu.Lock()
			g := gates[j.ID]
			mu.Unlock()
			running <- j.ID
			<-g
			return nil
		})
	})
	ids := make([]string, n)
	for i := range ids {
		res := "race-" + strconv.Itoa(i)
		id := NewJobID(res, time.Now())
		mu.Lock()
		gates[id] = make(chan struct{})
		mu.Unlock()
		ids[i] = h.enqueue(Spec{Type: "race", Resource: res, JobID: id})
	}
	for range ids {
		<-running
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			close(gates[id])
			_, errs[i] = h.stack.Cancel(bg, id, CancelRequest{By: "race"})
		}()
	}
	wg.Wait()
	won := 0
	for i, id := range ids {
		var v View
		eventually(t, 10*time.Second, "job "+id+" to settle", func() bool {
			v, _ = h.stack.Get(bg, id)
			return v.Record.Status.Terminal() && h.stack.Running() == 0
		})
		switch {
		case errs[i] == nil:
			if v.Record.Status != jobstore.StatusCancelled || !has(v, "cancelled") || has(v, "done") {
				t.Fatalf("cancel won but job is %s: %v", v.Record.Status, events(v))
			}
			won++
		case errors.Is(errs[i], ErrEnded):
			if v.Record.Status != jobstore.StatusDone || has(v, "cancelled") {
				t.Fatalf("finish won but job is %s: %v", v.Record.Status, events(v))
			}
		default:
			t.Fatal(errs[i])
		}
	}
	t.Logf("cancel won %d of %d races", won, n)
}

// An unknown id is ErrJobNotFound.
func TestCancelUnknownJob(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "x"}, func(ctx context.Context, j *Job) error { return nil })
	})
	id := NewJobID("", time.Now())
	for _, bad := range []string{id, "not-an-id"} {
		if _, err := h.stack.Cancel(bg, bad, CancelRequest{}); !errors.Is(err, ErrJobNotFound) {
			t.Fatalf("cancel %q: %v", bad, err)
		}
	}
}

// An effect applied after the cancel, by a handler that ignored its context, is refused: the
// effect frame checks the job record's fence, which the cancel raised. Neither the target nor the
// applied record changes.
func TestCancelRefusesALateEffect(t *testing.T) {
	t.Parallel()
	eff := NewEffect(`redis.call('HSET', KEYS[1], 'applied_by', ARGV[3]) return 1`)
	started, late := make(chan struct{}), make(chan error, 1)
	var target string
	h := newHarness(t, Config{LeaseTTL: 3 * time.Second}, func(s *Stack) {
		s.Register(TaskConfig{Type: "effect"}, func(ctx context.Context, j *Job) error {
			target = j.Key("target")
			close(started)
			<-ctx.Done()
			_, err := j.Apply(context.Background(), eff, target, nil)
			late <- err
			return nil
		})
	})
	id := h.enqueue(Spec{Type: "effect", Resource: "acct-9", OpKey: "op-9"})
	<-started
	h.cancelRunning(id, "late effect", late)
	keys, _ := h.stack.store.Keys(id, "op-9")
	if h.rdb.HExists(bg, target, "applied_by").Val() || h.rdb.Exists(bg, keys.Applied).Val() != 0 {
		t.Fatal("the late effect landed")
	}
}
