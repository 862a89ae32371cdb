package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// MaxBulk bounds an EnqueueMany.
const MaxBulk = 1000

// ErrBulkAborted: an atomic EnqueueMany created nothing because another item was refused.
var ErrBulkAborted = errors.New("engine: not created: another item of the atomic bulk was refused")

// bulkDeliverers is how many asynq enqueues of one bulk are in flight at once: asynq enqueues one
// task per call, and the stack's bulk client sends concurrent calls in shared pipelines
// (jobstore.Store.Batched).
const bulkDeliverers = MaxBulk

// BulkItem is one spec's outcome in EnqueueMany: what Enqueue would have answered.
type BulkItem struct {
	Enqueued
	Err error
}

// EnqueueMany enqueues specs as Enqueue does each, in shared round trips: one pipeline with every
// create, the new jobs' asynq enqueues (a few at once), one pipeline with every confirmation
// (and the duplicates' timeline events). An item whose create found a duplicate still waiting for
// its own enqueue (outside this bulk), or a job to replace, goes through Enqueue alone afterwards.
// atomic: when an item is refused (its spec, its create, its delivery) nothing is kept of any
// other, whose error is then ErrBulkAborted; a failure of the confirmation itself (Redis did
// not answer) may still leave part of the bulk (ErrOutcomeUnknown on those items).
func (s *Stack) EnqueueMany(ctx context.Context, specs []Spec, atomic bool) []BulkItem {
	client := s.bulkClient
	out := make([]BulkItem, len(specs))
	type pending struct {
		i    int
		tc   TaskConfig
		keys jobstore.Keys
		job  jobstore.NewJob
		c    *jobstore.Creation
	}
	var live []*pending
	now := s.now()
	for i, spec := range specs {
		tc, ok := s.TaskConfig(spec.Type)
		if !ok {
			out[i].Err = fmt.Errorf("%w: %q", ErrUnknownType, spec.Type)
			continue
		}
		dedup, err := checkSpec(spec)
		if err == nil {
			if specs[i].Tags, err = jobstore.NormalizeTags(spec.Tags); err != nil {
				err = fmt.Errorf("%w: %w", ErrInvalidSpec, err)
			}
		}
		if err == nil {
			specs[i].StartBy, err = deadlineOf(tc, specs[i], now)
		}
		if err != nil {
			out[i].Err = err
			continue
		}
		id := s.jobIDFor(spec, now)
		keys, err := s.keysFor(id, spec.OpKey, dedup)
		if err != nil {
			out[i].Err = err
			continue
		}
		// The record keeps the payload sealed (an encrypted type); the limit key sees the plaintext.
		stored := specs[i]
		if stored.Payload, err = s.sealValue(tc, id, jobstore.FieldPayload, spec.Payload); err != nil {
			out[i].Err = err
			continue
		}
		job := s.newRecord(ctx, id, tc, stored, dedup, now)
		waitsForKey(&job, tc, spec) // as a single enqueue's job
		live = append(live, &pending{i: i, tc: tc, keys: keys, job: job})
	}
	abort := func() []BulkItem {
		for i := range out {
			if out[i].Err == nil {
				out[i] = BulkItem{Err: ErrBulkAborted}
			}
		}
		return out
	}
	if atomic && len(live) < len(specs) {
		return abort()
	}

	_ = s.store.LoadBulkScripts(ctx) // else each create and confirm finds it missing and goes alone
	pipe := s.rdb.Pipeline()
	for _, p := range live {
		p.c = s.store.QueueCreate(ctx, pipe, p.keys, p.job)
	}
	if len(live) > 0 {
		_, _ = pipe.Exec(ctx)
	}
	var created, alone []*pending
	ours := map[string]int{} // job id created by this bulk -> its item
	waitsFor := map[int]string{}
	for _, p := range live {
		st, ex, err := p.c.Result(ctx, s.store)
		state, existing, err := createAnswer(p.job.ID, st, ex, err)
		switch {
		case err != nil:
			out[p.i].Err = err
		case state == jobstore.Created:
			created = append(created, p)
			ours[p.job.ID] = p.i
		case state == jobstore.Exists:
			out[p.i].Err = fmt.Errorf("%w: %s", ErrJobExists, p.job.ID)
		case state == jobstore.Duplicate:
			out[p.i].Enqueued = Enqueued{JobID: existing, Deduplicated: true}
		case state == jobstore.PendingExisting:
			if _, mine := ours[existing]; mine {
				waitsFor[p.i] = existing // a duplicate of an earlier item: its answer once that is confirmed
			} else {
				alone = append(alone, p)
			}
		default: // ReplaceExisting
			alone = append(alone, p)
		}
	}
	abandonCreated := func() {
		for _, p := range created {
			s.abandon(ctx, p.keys, p.job.ID)
		}
	}
	failed := func() bool {
		for _, p := range live {
			if out[p.i].Err != nil {
				return true
			}
		}
		return false
	}
	if atomic && failed() {
		abandonCreated()
		return abort()
	}

	// A fair type's items wait in their keys' lists, one after another in the bulk's order (a
	// sequence key's order is its waits' order); what their waits admit is delivered after the
	// confirmation, as a single enqueue's.
	var admitted []fairAdmitted
	for _, p := range created {
		if p.tc.Fair == nil {
			continue
		}
		entries, err := s.fairWait(ctx, p.tc, p.job.ID, p.job.Dedup, specs[p.i], "")
		out[p.i].Err = err
		admitted = append(admitted, fairAdmitted{tc: p.tc, entries: entries})
	}
	defer s.deliverFairAdmitted(ctx, admitted)
	var wg sync.WaitGroup
	sem := make(chan struct{}, bulkDeliverers)
	for _, p := range created {
		if p.tc.Fair != nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			spec := specs[p.i]
			out[p.i].Err = s.deliver(ctx, client, p.tc, p.job.ID, DeliveryID(p.job.ID, 1), spec.OpKey, p.job.Dedup,
				limitHeaders(p.tc, spec), firstDelay(spec))
		}()
	}
	wg.Wait()
	if atomic && failed() {
		abandonCreated()
		return abort()
	}

	var toConfirm []*pending
	for _, p := range created {
		if out[p.i].Err != nil {
			s.abandon(ctx, p.keys, p.job.ID)
			continue
		}
		toConfirm = append(toConfirm, p)
	}
	confirms := map[int]jobstore.Confirmation{}
	// In durable mode the pipeline ends with a WAIT, as a single enqueue's confirmation does.
	werr := s.store.Durability().Exec(ctx, s.rdb, func(pipe redis.Pipeliner) {
		type indexGroup struct{ tenant, tags string }
		byGroup := map[indexGroup][]string{}
		var ids []string
		var dues []time.Time
		deadline := s.store.WriteDeadline(ctx)
		for _, p := range toConfirm {
			spec := specs[p.i]
			var ttl time.Duration
			if d := spec.Dedup; d != nil && d.Policy != Throttle {
				ttl = dedupTTL(d)
			}
			confirms[p.i] = s.store.QueueConfirmSha(ctx, pipe, p.keys, p.job.ID, ttl, deadline)
			g := indexGroup{spec.Tenant, strings.Join(spec.Tags, ",")}
			byGroup[g] = append(byGroup[g], p.job.ID)
			ids, dues = append(ids, p.job.ID), append(dues, s.store.ExpiryDue(now, spec.StartBy))
		}
		for g, ids := range byGroup {
			var tags []string
			if g.tags != "" {
				tags = strings.Split(g.tags, ",")
			}
			s.store.QueueIndexMany(ctx, pipe, g.tenant, ids, tags, now)
		}
		s.store.QueueExpiryMany(ctx, pipe, ids, dues)
		for _, p := range live {
			if e := out[p.i]; e.Err == nil && e.Deduplicated {
				s.Stats.Deduplicated.Add(1)
				spec := specs[p.i]
				s.m.dedup.WithLabelValues(spec.Type, string(spec.Dedup.Policy), "deduplicated").Inc()
				if k := keysOr(s, e.JobID); k.Record != "" {
					s.store.QueueEvents(ctx, pipe, k, now, Event{Event: "deduplicated", Detail: string(specs[p.i].Dedup.Policy) + " " + specs[p.i].Dedup.Key})
				}
			}
		}
	})
	for _, p := range toConfirm {
		st, err := confirms[p.i].Result()
		switch {
		case err != nil:
			out[p.i].Err = fmt.Errorf("%w: job %s: %w", ErrOutcomeUnknown, p.job.ID, err)
		case st != jobstore.Confirmed:
			out[p.i].Err = fmt.Errorf("%w: job %s was %s at its confirmation", ErrNotAccepted, p.job.ID, st)
			s.abandon(ctx, p.keys, p.job.ID)
		case werr != nil:
			out[p.i] = BulkItem{Enqueued: Enqueued{JobID: p.job.ID}, Err: &notDurable{err: fmt.Errorf("job %s: %w", p.job.ID, werr)}}
		default:
			out[p.i].Enqueued = Enqueued{JobID: p.job.ID, Waiting: p.tc.Fair != nil}
		}
	}
	for i, existing := range waitsFor {
		if j := ours[existing]; out[j].Err == nil {
			out[i].Enqueued = Enqueued{JobID: existing, Deduplicated: true}
			s.Stats.Deduplicated.Add(1)
		} else {
			alone = append(alone, &pending{i: i}) // the job it collapsed onto was not kept
		}
	}
	for _, p := range alone {
		res, err := s.Enqueue(ctx, s.wfClient, specs[p.i])
		out[p.i] = BulkItem{Enqueued: res, Err: err}
	}
	return out
}
