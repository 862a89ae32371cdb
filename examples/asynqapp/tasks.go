package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/locking"
	"github.com/jobguard/jobguard/middleware"
)

// The application's task types.
const (
	typeReserve = "stock:reserve" // protected at lease level: producers use a plain client.Enqueue
	typeReport  = "report:build"  // protected at job level: producers use guard.Enqueue
	typeEmail   = "email:send"    // not protected: the application's retry policy, untouched
)

type reservation struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
	// WorkMS, when set, is how long this reservation's work takes (else the app's WORK_TIME).
	WorkMS int `json:"work_ms,omitempty"`
}

// newReservation is the task any producer enqueues with client.Enqueue.
func newReservation(sku string, qty int) *asynq.Task {
	b, _ := json.Marshal(reservation{SKU: sku, Qty: qty})
	return asynq.NewTask(typeReserve, b)
}

// skuOf is the resource of a reservation: one run per SKU at a time.
func skuOf(t *asynq.Task) (string, error) {
	var r reservation
	if err := json.Unmarshal(t.Payload(), &r); err != nil || r.SKU == "" {
		return "", fmt.Errorf("reservation payload: %v", err)
	}
	return "sku:" + r.SKU, nil
}

// reserveStock adds a reservation to its SKU's total, once per task, fenced.
var reserveStock = middleware.NewEffect(`return redis.call('HINCRBY', KEYS[1], 'reserved', ARGV[5])`)

func (a *app) reserve(ctx context.Context, t *asynq.Task) error {
	var r reservation
	if err := json.Unmarshal(t.Payload(), &r); err != nil {
		return middleware.Permanent(err)
	}
	run, _ := middleware.RunFrom(ctx)
	if a.observe != nil {
		a.observe(r.SKU, true)
		defer a.observe(r.SKU, false)
	}
	a.log.Debug().Str("sku", r.SKU).Msg("reservation started")
	// The work, busy in calls that do not watch ctx (as many do): only the fence stops a run that
	// lost its lease meanwhile from writing.
	work := a.work
	if r.WorkMS > 0 {
		work = time.Duration(r.WorkMS) * time.Millisecond
	}
	time.Sleep(work)
	// Bypass context cancellation: the fence, not the context, must refuse a stale run.
	wctx := context.WithoutCancel(ctx)
	// The last writer, fenced: a run that lost its lease cannot overwrite a newer one's.
	if err := run.Locks().SetValue(wctx, run.Fence(), run.Key("last-writer"), run.Fence().Owner, 0); err != nil {
		if errors.Is(err, locking.ErrStaleToken) {
			a.refused.Add(1)
		}
		return err
	}
	_, err := run.Apply(wctx, reserveStock, run.Key("stock"), nil, r.Qty)
	if errors.Is(err, middleware.ErrAlreadyApplied) {
		return nil
	}
	return err
}

func (a *app) report(ctx context.Context, t *asynq.Task) error {
	run, _ := middleware.RunFrom(ctx)
	run.SetResult("built " + string(t.Payload()))
	return nil
}

// email fails its first try (asynq's retry count 0, whichever worker takes it): the application's
// RetryDelayFunc decides when it comes back.
func (a *app) email(ctx context.Context, t *asynq.Task) error {
	a.emailsTried.Add(1)
	if retried, _ := asynq.GetRetryCount(ctx); retried == 0 {
		return errors.New("smtp: try again")
	}
	return nil
}
