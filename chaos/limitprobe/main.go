// Command limitprobe is jobguard with one task type more, limit-probe, for the chaos suite's
// tests of limits across processes (chaos/limits_procs_test.go; make chaos-limits builds it). A
// run works in steps, each taken only while the run's context lives and its limit slot may be
// trusted (Job.LimitValidFor), and logs every step on stderr, so that the test can tell which
// runs of a key worked at the same time across processes.
package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/app"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/guardstack"
	"github.com/jobguard/jobguard/middleware"
	"github.com/jobguard/jobguard/tasks"
	"github.com/jobguard/jobguard/tasks/registry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	log := zerolog.New(os.Stderr)
	code := app.Main(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr, append(registry.All(), probeTask(log)))
	stop()
	os.Exit(code)
}

// TypeLimitProbe is the probe's task type; its limit counts per tenant (3 at once unless
// TASK_LIMITS says otherwise).
const TypeLimitProbe = "limit-probe"

// request is a probe job: steps of step_ms each, for a tenant (its limit key).
type request struct {
	TenantID string `json:"tenant_id"`
	Name     string `json:"name"`
	Steps    int    `json:"steps"`
	StepMS   int    `json:"step_ms"`
}

func (r *request) Validate() error {
	switch {
	case r.TenantID == "" || r.Name == "":
		return &tasks.FieldError{Field: "name", Detail: "tenant_id and name are required"}
	case r.Steps < 0 || r.Steps > 1000 || r.StepMS < 0 || r.StepMS > 10_000:
		return &tasks.FieldError{Field: "steps", Detail: "steps 0-1000 of step_ms 0-10000"}
	}
	return nil
}

func (r *request) Tenant() string { return r.TenantID }

// Spec puts every job on a resource of its own: only the limit, not a lease, keeps runs apart.
func (r *request) Spec() engine.Spec {
	b, _ := json.Marshal(r)
	return engine.Spec{Type: TypeLimitProbe, Tenant: r.TenantID, Resource: r.TenantID + ":" + r.Name, Payload: b}
}

func probeTask(log zerolog.Logger) tasks.Task {
	return tasks.Task{
		Type: TypeLimitProbe,
		Config: middleware.Job{MaxAttempts: 20,
			Limit: middleware.Limit{Key: func(o middleware.EnqueueOptions) string { return o.Tenant }, Concurrency: 3}},
		Request: func() tasks.Request { return &request{} },
		Handler: guardstack.EngineHandlerOf(func(tasks.Deps) engine.Handler { return probe{log: log}.run }),
	}
}

//go:embed holder_live.lua
var holderLiveLua string

var holderLive = redis.NewScript(holderLiveLua)

// Fields of the probe's log lines (chaos/limits_procs_test.go reads them).
const (
	eventEnter = "limit_probe_enter" // the handler was entered: limit_start_ms is the start the take granted
	eventStep  = "limit_probe_step"  // a step was taken at at_ns; holder is what Redis said of the slot then
	eventStop  = "limit_probe_stop"  // the run stopped before its last step: by its context, or by LimitValidFor's 0
	eventLeave = "limit_probe_leave" // the handler returned
)

type probe struct{ log zerolog.Logger }

func (p probe) run(ctx context.Context, j *engine.Job) error {
	var r request
	if err := json.Unmarshal(j.Payload, &r); err != nil {
		return engine.Permanent(fmt.Errorf("payload: %w", err))
	}
	log := p.log.With().Str("job_id", j.ID).Str("lease_owner", j.Fence().Owner).Str("limit_key", r.TenantID).
		Int64("limit_token", j.LimitToken()).Int("pid", os.Getpid()).Logger()
	log.Info().Str("event", eventEnter).Int64("at_ns", time.Now().UnixNano()).Int64("limit_start_ms", j.LimitStart().UnixMilli()).Send()
	defer func() { log.Info().Str("event", eventLeave).Int64("at_ns", time.Now().UnixNano()).Send() }()
	holders := engine.LimitHoldersKey(j.Locks(), TypeLimitProbe, r.TenantID)
	for i := range r.Steps {
		// The step's instant is taken before the check: a pause between the two makes the check
		// fail, and one after the check shows in what Redis says of the holder.
		at := time.Now()
		if ctx.Err() != nil {
			return stop(ctx, log, "context")
		}
		if j.LimitValidFor() <= 0 {
			return stop(ctx, log, "limit_valid_for") // the context's cancellation had not run yet
		}
		log.Info().Str("event", eventStep).Int("step", i).Int64("at_ns", at.UnixNano()).Str("holder", holderState(ctx, j, holders)).Send()
		select {
		case <-time.After(time.Duration(r.StepMS) * time.Millisecond):
		case <-ctx.Done():
			return stop(ctx, log, "context")
		}
	}
	return nil
}

// stop logs what stopped the run (by: "context" or "limit_valid_for") and returns its error: the
// context's cause, or the lost slot (LimitValidFor's 0 has cancelled the run already; the relay
// to the handler's context may not have run yet).
func stop(ctx context.Context, log zerolog.Logger, by string) error {
	err := context.Cause(ctx)
	if err == nil {
		err = fmt.Errorf("limit-probe: %w: it may no longer be trusted", engine.ErrSlotLost)
	}
	log.Info().Str("event", eventStop).Str("by", by).Str("cause", err.Error()).Int64("at_ns", time.Now().UnixNano()).Send()
	return err
}

// holderState asks Redis whether the run's slot is live: "live", "lapsed", or "unreached" (no
// answer within 300 ms, e.g. while the process is cut off).
func holderState(ctx context.Context, j *engine.Job, holders string) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 300*time.Millisecond)
	defer cancel()
	live, err := holderLive.Run(ctx, j.Redis(), []string{holders}, j.Fence().Owner).Int()
	switch {
	case err != nil:
		return "unreached"
	case live == 1:
		return "live"
	}
	return "lapsed"
}
