package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/tasks/registry"
)

// A worker process reconciles every RECONCILE_INTERVAL: a queued job whose delivery was deleted
// from asynq (as the UI or asynq's CLI does) while no worker ran is done once a worker starts,
// and its /metrics count the repair.
func TestWorkersReconcileALostDelivery(t *testing.T) {
	t.Parallel()
	url := redistest.NewDB(t).URL()
	api := startApp(t, RoleAPI, map[string]string{"REDIS_URL": url})
	_, body := post(t, api, "/jobs/reserve-stock", `{"tenant_id":"t1","order_id":"o-1","sku":"s-1","quantity":1}`)
	var a jobAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil || a.JobID == "" {
		t.Fatalf("enqueue: %s", body)
	}
	v := waitJob(t, api, a.JobID, "queued")
	if err := asynq.NewInspectorFromRedisClient(api.Redis()).DeleteTask(v.Queue, engine.DeliveryID(a.JobID, 1)); err != nil {
		t.Fatal(err)
	}
	// The record was left alone for longer than the reconciler's grace.
	k, _ := api.API().deps.Stack.Store().Keys(a.JobID, "")
	api.Redis().HSet(context.Background(), k.Record, "updated_at", time.Now().Add(-time.Minute).UnixMilli())
	worker := startApp(t, RoleWorker, map[string]string{"REDIS_URL": url, "RECONCILE_INTERVAL": "100ms"})
	waitJob(t, api, a.JobID, "done")
	if n := scrape(t, worker).value(t, "jobguard_reconcile_repairs_total", map[string]string{"type": "reserve-stock", "kind": "redelivered"}); n != 1 {
		t.Fatalf("reconcile_repairs_total{redelivered} = %v, want 1", n)
	}
}

func TestReconcileIntervalIsValidated(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"50ms", "2h", "often"} {
		_, err := config.FromLookup(lookupFrom(map[string]string{"RECONCILE_INTERVAL": v}), registry.All())
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Var != "RECONCILE_INTERVAL" {
			t.Fatalf("RECONCILE_INTERVAL=%s: %v", v, err)
		}
	}
	if c, err := config.FromLookup(lookupFrom(nil), registry.All()); err != nil || c.ReconcileInterval != 15*time.Second {
		t.Fatalf("default: %v %v", c.ReconcileInterval, err)
	}
}
