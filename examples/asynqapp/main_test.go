package main

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/middleware"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// overlap counts the reservations running at once per SKU, across both workers.
type overlap struct {
	mu      sync.Mutex
	running map[string]int
	most    int
}

func (o *overlap) observe(sku string, running bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if running {
		o.running[sku]++
		if sku != "slow" { // the lost run and its copy both run: only the fence keeps them apart
			o.most = max(o.most, o.running[sku])
		}
	} else {
		o.running[sku]--
	}
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
	}
}

// The application as its team wrote it, two workers, with jobguard added: reservations enqueued
// with plain client.Enqueue never run twice at once on one SKU and are applied once each; a run
// whose lease lapsed is rescued and its write refused; the unprotected type is retried by the
// application's own RetryDelayFunc; the application's middleware wraps every handler.
func TestTheApplicationKeepsItsPiecesAndGetsTheGuarantees(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	ov := &overlap{running: map[string]int{}}
	var apps []*app
	for range 2 {
		a := newApp(db.Client, zerolog.Nop(), time.Second, 20*time.Millisecond)
		a.observe = ov.observe
		srv := asynq.NewServerFromRedisClient(db.Client, a.serverConfig(4))
		if err := srv.Start(a.mux()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Shutdown(); _ = a.guard.Close() })
		apps = append(apps, a)
	}
	client := asynq.NewClientFromRedisClient(db.Client)
	insp := asynq.NewInspectorFromRedisClient(db.Client)
	ctx := context.Background()

	// A run that will lose its lease while busy: it stands for a paused worker.
	slow, _ := json.Marshal(reservation{SKU: "slow", Qty: 1, WorkMS: 2500})
	if _, err := client.Enqueue(asynq.NewTask(typeReserve, slow)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the slow reservation running", func() bool {
		return db.Client.Exists(ctx, "shop:{sku:slow}:lock").Val() == 1
	})
	db.Client.Del(ctx, "shop:{sku:slow}:lock") // its lease lapses; no renewal brings it back
	waitFor(t, 5*time.Second, "the lost run rescued", func() bool {
		n, _ := apps[1].guard.RescueLeases(ctx, insp)
		return n == 1
	})

	for i := range 40 {
		if _, err := client.Enqueue(newReservation([]string{"a", "b", "c", "d"}[i%4], 1)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client.Enqueue(asynq.NewTask(typeEmail, []byte("hi")), asynq.MaxRetry(3)); err != nil {
		t.Fatal(err)
	}
	report, err := apps[0].guard.Enqueue(ctx, asynq.NewTask(typeReport, []byte("q3")), middleware.EnqueueOptions{})
	if err != nil {
		t.Fatal(err)
	}

	total := func(sku string) string { return db.Client.HGet(ctx, "shop:{sku:"+sku+"}:stock", "reserved").Val() }
	waitFor(t, 30*time.Second, "every reservation applied", func() bool {
		return total("a") == "10" && total("b") == "10" && total("c") == "10" && total("d") == "10" && total("slow") == "1"
	})
	waitFor(t, 10*time.Second, "the email sent on its second try", func() bool {
		return apps[0].emailsTried.Load()+apps[1].emailsTried.Load() == 2
	})
	waitFor(t, 10*time.Second, "the report built", func() bool {
		st, err := apps[0].guard.Status(ctx, report.JobID)
		return err == nil && st.Status == "done" && st.Result == "built q3"
	})
	waitFor(t, 10*time.Second, "the lost run's write refused", func() bool {
		return apps[0].refused.Load()+apps[1].refused.Load() == 1
	})
	waitFor(t, 10*time.Second, "queues drained", func() bool {
		qi, err := insp.GetQueueInfo("default")
		return err == nil && qi.Pending+qi.Active+qi.Scheduled+qi.Retry == 0
	})
	if total("slow") != "1" {
		t.Fatalf("the slow reservation applied %s times", total("slow"))
	}
	ov.mu.Lock()
	most := ov.most
	ov.mu.Unlock()
	if most != 1 {
		t.Fatalf("%d reservations of one SKU ran at once, want 1", most)
	}
	if n := apps[0].retryAsked.Load() + apps[1].retryAsked.Load(); n < 1 {
		t.Fatalf("the application's RetryDelayFunc was asked %d times, want the email's retry", n)
	}
	// 40 + the slow one and its copy (+ asynq's redelivery of the lost original at most) + 2
	// emails + the report: the application's middleware saw every delivery.
	if n := apps[0].logged.Load() + apps[1].logged.Load(); n < 45 {
		t.Fatalf("the application's middleware wrapped %d deliveries, want at least 45", n)
	}
	if arch, _ := insp.ListArchivedTasks("default"); len(arch) != 0 {
		t.Fatalf("%d tasks archived", len(arch))
	}
}
