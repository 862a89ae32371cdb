package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/seal"
	"github.com/jobguard/jobguard/locking"
	"github.com/jobguard/jobguard/schedule"
	"github.com/jobguard/jobguard/web"
)

// monitoringJobs hands the monitoring UI the engine's and the scheduler's operations (web knows
// neither): its task actions and its jobs and schedules pages go through here.
type monitoringJobs struct {
	stack  *engine.Stack
	client *asynq.Client
	sched  *schedule.Scheduler
	// decrypt (MONITORING_DECRYPT) shows encrypted results decrypted; else the page says
	// "encrypted" where a value is.
	decrypt bool
}

var _ web.Jobs = monitoringJobs{}

// encryptedLabel stands in the monitoring UI for a value kept encrypted (ENCRYPT_TYPES).
const encryptedLabel = "encrypted"

func (m monitoringJobs) JobOf(headers map[string]string) string { return headers[engine.HeaderJobID] }

func (m monitoringJobs) Job(ctx context.Context, id string) (*web.Job, error) {
	v, err := m.stack.Get(ctx, id)
	if errors.Is(err, engine.ErrJobNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if m.decrypt {
		if v, err = m.stack.Open(v); err != nil {
			return nil, err
		}
	}
	r := v.Record
	j := &web.Job{
		ID: r.JobID, Type: r.Type, Queue: r.Queue, Tenant: r.Tenant, Resource: r.Resource, Status: string(r.Status),
		Ended: r.Status.Terminal(), Failed: r.Status == jobstore.StatusFailed, Attempt: r.Attempt, MaxAttempts: r.MaxAttempts,
		Progress: r.Progress, ProgressNote: r.ProgressNote, ProgressReported: !r.ProgressAt.IsZero(), Tags: r.Tags, LastError: r.LastError, Result: r.Result, Delivery: r.Delivery,
		Record: make(map[string]string, len(v.Raw)),
		Lease:  web.Lease{Owner: v.Lease.Owner, Remaining: v.Lease.Remaining, Fence: v.Lease.Fence},
	}
	j.Workflow, j.WorkflowNode, _ = jobstore.WorkflowOf(r.Workflow)
	if seal.Sealed(j.Result) {
		j.Result = encryptedLabel
	}
	for k, val := range v.Raw {
		switch k {
		case jobstore.FieldPayload, jobstore.FieldCheckpoint:
			// The payload and checkpoint are the tenant's data: the page shows their size only.
			if seal.Sealed(val) {
				val = encryptedLabel
			} else {
				val = "(" + strconv.Itoa(len(val)) + " bytes)"
			}
		case jobstore.FieldResult:
			if seal.Sealed(val) && !m.decrypt {
				val = encryptedLabel
			} else {
				val = r.Result
			}
		case locking.FieldFenceOwner, locking.FieldFenceToken:
			continue
		}
		j.Record[k] = val
	}
	for n := 1; n <= r.Deliveries; n++ {
		j.Deliveries = append(j.Deliveries, engine.DeliveryID(r.JobID, n))
	}
	for _, e := range v.Timeline {
		j.Timeline = append(j.Timeline, web.Event{At: time.UnixMilli(e.At).UTC(), Event: e.Event, Delivery: e.Delivery, Worker: e.Worker,
			Detail: e.Detail, Token: e.Token, Attempt: e.Attempt})
	}
	return j, nil
}

func (m monitoringJobs) List(ctx context.Context, q web.JobQuery) (web.JobPage, error) {
	tags, err := engine.NormalizeTags(q.Tags)
	if err != nil {
		return web.JobPage{}, problem.BadField("tags", "tags must be at most 8, each 1-64 characters of A-Z a-z 0-9 . _ : = - ("+tagsProblem(err)+")")
	}
	p, err := m.stack.List(ctx, engine.ListQuery{Tenant: q.Tenant, Status: jobstore.Status(q.Status), Type: q.Type, Cursor: q.Cursor, Limit: q.Limit,
		Tags: tags, TagsMatch: q.TagsMatch, Error: q.Error, CreatedAfter: q.CreatedAfter, CreatedBefore: q.CreatedBefore})
	if errors.Is(err, engine.ErrBadCursor) {
		return web.JobPage{}, problem.BadField("cursor", "cursor is not one a list answered")
	}
	if err != nil {
		return web.JobPage{}, err
	}
	out := web.JobPage{Next: p.Next}
	for _, l := range p.Jobs {
		out.Jobs = append(out.Jobs, web.JobRow{ID: l.JobID, Tenant: l.Tenant, Type: l.Type, Queue: l.Queue, Status: string(l.Status),
			Ended: l.Status.Terminal(), Failed: l.Status == jobstore.StatusFailed, Attempt: l.Attempt, CreatedAt: l.CreatedAt,
			UpdatedAt: l.UpdatedAt, Tags: l.Tags, LastError: l.LastError, Progress: l.Progress, ProgressReported: !l.ProgressAt.IsZero(),
			Workflow: workflowID(l.Workflow)})
	}
	return out, nil
}

func (m monitoringJobs) Cancel(ctx context.Context, id, by, why string) error {
	_, err := m.stack.Cancel(ctx, id, engine.CancelRequest{By: by, Why: why})
	return err
}

func (m monitoringJobs) Replay(ctx context.Context, id string) error {
	_, err := m.stack.Replay(ctx, m.client, id)
	return err
}

func (m monitoringJobs) Schedules(ctx context.Context) (web.Schedules, error) {
	ov, err := m.sched.Overview(ctx)
	if err != nil {
		return web.Schedules{}, err
	}
	out := web.Schedules{Leader: ov.Leader}
	for _, s := range ov.Schedules {
		e := web.Schedule{Name: s.Name, Spec: s.Cron, Type: s.Type, Timezone: s.Timezone, Overlap: string(s.Overlap),
			CatchUp: string(s.CatchUp), LastJobID: s.LastJobID, LastJobStatus: s.LastJobStatus, Paused: s.Paused}
		if s.LastTick != nil {
			e.LastTick = *s.LastTick
		}
		if s.NextTick != nil {
			e.NextTick = *s.NextTick // the page shows nothing for the zero time
		}
		out.Entries = append(out.Entries, e)
	}
	return out, nil
}

// PauseSchedule is the schedules page's pause and resume: an unknown schedule is 404 (field
// name), as on POST /schedules/{name}/pause.
func (m monitoringJobs) PauseSchedule(ctx context.Context, name string, paused bool) error {
	err := m.sched.SetPaused(ctx, name, paused)
	if errors.Is(err, schedule.ErrUnknown) {
		return &problem.HTTPError{Status: http.StatusNotFound, Field: "name", Detail: "no schedule is called " + fmt.Sprintf("%q", name)}
	}
	return err
}
