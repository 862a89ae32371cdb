package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/loop"
)

// Reconciler defaults.
const (
	// DefaultReconcileInterval is how often a worker compares records with deliveries.
	DefaultReconcileInterval = 15 * time.Second
	// DefaultReconcileGrace is how long a record must have been left unchanged before its missing
	// delivery is repaired: far above the milliseconds between a rescue's or an enqueue's write
	// and asynq's.
	DefaultReconcileGrace      = 30 * time.Second
	defaultReconcileRecords    = 500
	defaultReconcileDeliveries = 100
)

// The repair kinds (metric reconcile_repairs_total's kind label).
const (
	// RepairRedelivered: a queued or retrying job whose delivery asynq no longer had (deleted in
	// the UI or the CLI, lost) got the same delivery enqueued again.
	RepairRedelivered = "redelivered"
	// RepairUnarchived: a queued or retrying job whose delivery asynq had archived got it run.
	RepairUnarchived = "unarchived"
	// RepairOrphan: a processing job with no live lease and no delivery in asynq was rescued as
	// the rescuer rescues one whose worker died (retrying, or failed when out of attempts).
	RepairOrphan = "orphan"
	// RepairDropped: a pending, scheduled or retry delivery whose record is gone (expired or
	// deleted) was deleted from asynq; it would never have run a handler.
	RepairDropped = "dropped"
)

var repairKinds = []string{RepairRedelivered, RepairUnarchived, RepairOrphan, RepairDropped}

// ReconcilerConfig configures a Reconciler; the zero value of each field means its default.
type ReconcilerConfig struct {
	// Interval between passes (default DefaultReconcileInterval).
	Interval time.Duration
	// Grace is how long a record must be unchanged before its delivery is looked for (default
	// DefaultReconcileGrace).
	Grace time.Duration
	// Records is how many entries of the index of all jobs a pass reads (default 500); the next
	// pass goes on from there, and the one after the oldest starts again at the newest.
	Records int
	// Deliveries is how many deliveries of each queue and state (pending, scheduled, retry) a
	// pass reads (default 100), going on likewise.
	Deliveries int
}

func (c ReconcilerConfig) withDefaults() ReconcilerConfig {
	if c.Interval <= 0 {
		c.Interval = DefaultReconcileInterval
	}
	if c.Grace <= 0 {
		c.Grace = DefaultReconcileGrace
	}
	if c.Records <= 0 {
		c.Records = defaultReconcileRecords
	}
	if c.Deliveries <= 0 {
		c.Deliveries = defaultReconcileDeliveries
	}
	return c
}

// Reconciler finds and repairs drift between job records and asynq's deliveries, which asynq's
// own tools (the UI, its CLI) and lost writes cause: a job that has not ended whose delivery asynq
// no longer has or has archived (it would wait for ever), and a delivery whose job is gone. Every
// worker runs one, like the rescuer; passes may overlap across workers because every repair is
// decided by a script that finds the record as it was read (or by asynq's own task-id
// uniqueness). Each pass reads a bounded part of the index of all jobs and of each queue, and
// carries on from there at the next.
type Reconciler struct {
	s       *Stack
	insp    *asynq.Inspector
	client  *asynq.Client
	rescuer *Rescuer
	cfg     ReconcilerConfig

	mu      sync.Mutex
	records string         // cursor in the index of all jobs
	pages   map[string]int // next page of each queue and state
}

// Repairs counts what a pass repaired, by kind.
type Repairs map[string]int

// NewReconciler returns a reconciler for the stack's task types.
func (s *Stack) NewReconciler(insp *asynq.Inspector, client *asynq.Client, cfg ReconcilerConfig) *Reconciler {
	return &Reconciler{s: s, insp: insp, client: client, rescuer: s.NewRescuer(insp, client, 0), cfg: cfg.withDefaults(), pages: map[string]int{}}
}

// Interval is the time between passes.
func (r *Reconciler) Interval() time.Duration { return r.cfg.Interval }

// Run reconciles every interval until ctx ends.
func (r *Reconciler) Run(ctx context.Context) {
	loop.Every(ctx, r.cfg.Interval, func() {
		if _, err := r.Pass(ctx); err != nil && ctx.Err() == nil {
			r.s.log.Warn().Err(err).Msg("reconcile pass failed")
		}
	})
}

// Pass reads the next part of the index of all jobs and of each queue's deliveries, repairs what
// has drifted, and says what it repaired. Passes of one reconciler do not overlap.
func (r *Reconciler) Pass(ctx context.Context) (Repairs, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	done := Repairs{}
	err := r.openRecords(ctx, done)
	if derr := r.deliveries(ctx, done); err == nil {
		err = derr
	}
	return done, err
}

// openRecords looks at the open jobs of the next part of the index for deliveries asynq lost.
func (r *Reconciler) openRecords(ctx context.Context, done Repairs) error {
	open, next, err := r.s.store.OpenJobs(ctx, r.records, r.cfg.Records)
	if errors.Is(err, jobstore.ErrBadCursor) {
		r.records = "" // the entry it named was trimmed: start again at the newest
		return nil
	}
	if err != nil {
		return fmt.Errorf("engine: reconcile: %w", err)
	}
	r.records = next
	now := r.s.now()
	for _, o := range open {
		tc, known := r.s.TaskConfig(o.Type)
		if !known || o.Delivery == "" || now.Sub(o.Updated) < r.cfg.Grace {
			continue
		}
		if o.Status == jobstore.StatusProcessing && (o.LeaseHeld || now.Sub(o.HeartbeatAt) < tc.LeaseTTL) {
			continue // a live run
		}
		state, err := r.deliveryState(ctx, o.Queue, o.Delivery)
		lost := errors.Is(err, asynq.ErrTaskNotFound)
		if err != nil && !lost {
			return fmt.Errorf("engine: reconcile: read delivery %s: %w", o.Delivery, err)
		}
		switch {
		case o.Status == jobstore.StatusProcessing && lost:
			r.orphan(ctx, tc, o, done)
		case o.Status == jobstore.StatusProcessing:
			// asynq has it: the rescuer (active) or asynq's own redelivery (pending, retry) runs it.
		case lost:
			r.redeliver(ctx, tc, o, done)
		case state == asynq.TaskStateArchived:
			r.unarchive(ctx, o, done)
		}
	}
	return nil
}

// deliveryState is the state of a delivery in asynq, asynq.ErrTaskNotFound when it has none. A
// queue asynq:queues does not name (Redis restarted empty) is read directly: its tasks are not
// lost for the inspector's refusing it.
func (r *Reconciler) deliveryState(ctx context.Context, queue, id string) (asynq.TaskState, error) {
	return taskState(ctx, r.insp, r.s.rdb, queue, id)
}

func (r *Reconciler) counted(typ, kind string, done Repairs) {
	done[kind]++
	r.s.m.reconciled.WithLabelValues(typ, kind).Inc()
}

// redeliver enqueues a queued or retrying job's lost delivery again, under the same id: the start
// script knows it as the job's current delivery.
func (r *Reconciler) redeliver(ctx context.Context, tc TaskConfig, o jobstore.Open, done Repairs) {
	log := r.s.log.With().Str("job_id", o.JobID).Str("delivery", o.Delivery).Str("event", "reconciled").Logger()
	headers, err := r.limitHeaders(ctx, tc, o)
	if err != nil {
		return // Redis failed: the next pass reads it again
	}
	st, err := r.s.store.TakeLostDelivery(ctx, o, r.s.now(), "delivery "+o.Delivery+" was missing from asynq; enqueued again")
	if err != nil || st != jobstore.Retaken {
		return // changed meanwhile (or Redis failed): the next pass reads it again
	}
	if o.Workflow != "" {
		// A workflow's node (released, its delivery lost): its end tells the workflow at once.
		h := map[string]string{HeaderWorkflow: o.Workflow}
		for k, v := range headers {
			h[k] = v
		}
		headers = h
	}
	err = r.s.deliverTo(ctx, r.client, tc, r.s.recordQueue(tc.Queue, o.JobID, o.Queue), o.JobID, o.Delivery, o.OpKey, o.Dedup, headers, 0)
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		log.Warn().Err(err).Msg("lost delivery not enqueued again; the next pass after the grace retries")
		return
	}
	r.counted(o.Type, RepairRedelivered, done)
	log.Info().Str("kind", RepairRedelivered).Msg("lost delivery of a job that has not ended enqueued again")
}

// limitHeaders are the headers that carry the job's limit key, as its first delivery did: without
// them a limited job enqueued again would run outside its limit. A key computed from the job's
// spec costs a read of the record (this path is rare); a type without a limit or key reads nothing.
func (r *Reconciler) limitHeaders(ctx context.Context, tc TaskConfig, o jobstore.Open) (map[string]string, error) {
	if tc.Limit.Key == nil {
		return limitHeaders(tc, Spec{}), nil
	}
	keys, err := r.s.store.Keys(o.JobID, "")
	if err != nil {
		return nil, err
	}
	info, err := r.s.store.ReplayInfo(ctx, keys)
	if err != nil {
		return nil, err
	}
	payload, err := r.s.openValue(o.JobID, jobstore.FieldPayload, info.Payload)
	if err != nil {
		return nil, err
	}
	return limitHeaders(tc, Spec{Type: info.Type, Tenant: info.Tenant, Resource: info.Resource, Payload: payload, OpKey: info.OpKey}), nil
}

// unarchive runs a queued or retrying job's archived delivery (asynq's CLI archived it).
func (r *Reconciler) unarchive(ctx context.Context, o jobstore.Open, done Repairs) {
	st, err := r.s.store.TakeLostDelivery(ctx, o, r.s.now(), "delivery "+o.Delivery+" was archived in asynq; run again")
	if err != nil || st != jobstore.Retaken {
		return
	}
	log := r.s.log.With().Str("job_id", o.JobID).Str("delivery", o.Delivery).Str("event", "reconciled").Logger()
	if err := r.insp.RunTask(o.Queue, o.Delivery); err != nil {
		log.Warn().Err(err).Msg("archived delivery not run; the next pass after the grace retries")
		return
	}
	r.counted(o.Type, RepairUnarchived, done)
	log.Info().Str("kind", RepairUnarchived).Msg("archived delivery of a job that has not ended run again")
}

// orphan rescues a processing job whose run is dead and whose delivery asynq no longer has: the
// rescuer only sees active deliveries, so without this it would stay processing for ever.
func (r *Reconciler) orphan(ctx context.Context, tc TaskConfig, o jobstore.Open, done Repairs) {
	lh, err := r.limitHeaders(ctx, tc, o)
	if err != nil {
		return // Redis failed: the next pass reads it again
	}
	headers := map[string]string{HeaderJobID: o.JobID}
	if key, ok := lh[HeaderLimitKey]; ok {
		headers[HeaderLimitKey] = key
	}
	if o.OpKey != "" {
		headers[HeaderOpKey] = o.OpKey
	}
	if o.Dedup != "" {
		headers[HeaderDedup] = o.Dedup
	}
	if !r.rescuer.rescue(ctx, &asynq.TaskInfo{ID: o.Delivery, Queue: o.Queue, Type: o.Type, Headers: headers}) {
		return
	}
	k, err := r.s.store.Keys(o.JobID, "")
	if err == nil {
		pipe := r.s.rdb.Pipeline()
		r.s.store.QueueEvents(ctx, pipe, k, r.s.now(), jobstore.Event{Event: "reconciled", Delivery: o.Delivery,
			Detail: "processing with no live lease and delivery " + o.Delivery + " missing from asynq; rescued"})
		_, _ = pipe.Exec(ctx)
	}
	r.counted(o.Type, RepairOrphan, done)
	r.s.log.Info().Str("job_id", o.JobID).Str("delivery", o.Delivery).Str("event", "reconciled").Str("kind", RepairOrphan).
		Msg("processing job with no lease and no delivery rescued")
}

// deliveries looks at the next page of each queue's pending, scheduled and retry deliveries for
// ones whose record is gone, and deletes them: they could only be acknowledged without running.
// Archived deliveries are left to asynq's own trimming (they are the dead-letter record).
func (r *Reconciler) deliveries(ctx context.Context, done Repairs) error {
	queues, err := r.insp.Queues()
	if err != nil {
		return fmt.Errorf("engine: reconcile: list queues: %w", err)
	}
	lists := []struct {
		state string
		list  func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error)
	}{{"pending", r.insp.ListPendingTasks}, {"scheduled", r.insp.ListScheduledTasks}, {"retry", r.insp.ListRetryTasks}}
	for _, q := range queues {
		for _, l := range lists {
			key := q + "\x00" + l.state
			page := max(r.pages[key], 1)
			tasks, err := l.list(q, asynq.PageSize(r.cfg.Deliveries), asynq.Page(page))
			if err != nil {
				return fmt.Errorf("engine: reconcile: list %s deliveries of %s: %w", l.state, q, err)
			}
			r.pages[key] = page + 1
			if len(tasks) < r.cfg.Deliveries {
				r.pages[key] = 1
			}
			if err := r.dropOrphaned(ctx, q, tasks, done); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *Reconciler) dropOrphaned(ctx context.Context, queue string, tasks []*asynq.TaskInfo, done Repairs) error {
	var ours []*asynq.TaskInfo
	var ids []string
	for _, t := range tasks {
		id := t.Headers[HeaderJobID]
		if _, known := r.s.TaskConfig(t.Type); !known || !r.s.owns(t.Headers) {
			continue // not a delivery of this stack's jobs (another application's, say: ownership.go)
		}
		ours = append(ours, t)
		ids = append(ids, id)
	}
	gone, err := r.s.store.Missing(ctx, ids)
	if err != nil {
		return fmt.Errorf("engine: reconcile: %w", err)
	}
	for i, t := range ours {
		if !gone[i] {
			continue
		}
		// Refused once it is active: its start then finds no record and acknowledges it.
		if err := r.insp.DeleteTask(queue, t.ID); err != nil {
			continue
		}
		r.counted(t.Type, RepairDropped, done)
		r.s.log.Info().Str("job_id", ids[i]).Str("delivery", t.ID).Str("event", "reconciled").Str("kind", RepairDropped).
			Msg("delivery of a job whose record is gone deleted")
	}
	return nil
}
