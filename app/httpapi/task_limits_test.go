package httpapi

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/tasks/registry"
)

// TASK_LIMITS overrides the limits of the example tasks over their code's (which count by
// tenant and limit nothing), without touching the registry; a bad entry names the variable.
func TestTaskLimitsOverrideTheCode(t *testing.T) {
	t.Parallel()
	c, err := config.FromLookup(lookupFrom(map[string]string{"TASK_LIMITS": "rebuild-cache=concurrency:3,rate:20/2s,burst:4; reserve-stock=concurrency:1"}), registry.All())
	if err != nil {
		t.Fatal(err)
	}
	limits := map[string]string{}
	for _, task := range c.Tasks {
		l := task.Config.Limit
		limits[task.Type] = l.String()
		if l.Key == nil {
			t.Errorf("%s lost its key", task.Type)
		}
	}
	if limits["rebuild-cache"] != "concurrency 3, rate 20 per 2s, burst 4" || limits["reserve-stock"] != "concurrency 1" {
		t.Fatalf("limits %v", limits)
	}
	for _, task := range registry.All() {
		if l := task.Config.Limit; l.Concurrency != 0 || l.Rate != 0 {
			t.Fatalf("the registry changed: %s %+v", task.Type, l)
		}
	}
	for _, bad := range []string{"nosuch=concurrency:1", "rebuild-cache=concurrency:x", "rebuild-cache=rate:5/soon",
		"rebuild-cache=speed:3", "rebuild-cache=rate:5000/1s", "rebuild-cache"} {
		_, err := config.FromLookup(lookupFrom(map[string]string{"TASK_LIMITS": bad}), registry.All())
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Var != "TASK_LIMITS" {
			t.Errorf("TASK_LIMITS=%q: %v", bad, err)
		}
	}
}

// The app registers the overridden limits: the metrics show them per task type.
func TestTaskLimitsReachTheWorkers(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAll, map[string]string{"TASK_LIMITS": "rebuild-cache=concurrency:3,rate:5/1s"})
	_, body := get(t, r.base+"/metrics")
	for _, want := range []string{
		`jobguard_limit{kind="concurrency",type="rebuild-cache"} 3`,
		`jobguard_limit{kind="rate_per_second",type="rebuild-cache"} 5`,
		`jobguard_limit{kind="concurrency",type="reserve-stock"} 0`,
		`jobguard_limit_slots_held{type="rebuild-cache"} 0`,
		`jobguard_limit_waits_total{reason="full",type="rebuild-cache"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TASK_LIMITS turns on fair dispatch per type (capacity, weights per key, sequences, shards), on a copy:
// the registry keeps its FIFO types; a bad fair part names the variable.
func TestTaskLimitsTurnOnFairDispatch(t *testing.T) {
	t.Parallel()
	c, err := config.FromLookup(lookupFrom(map[string]string{"TASK_LIMITS": "rebuild-cache=fair:on,capacity:16,weight:gold=5,weight:silver=2,shards:4;" +
		"reserve-stock=sequence:on,on_failure:block"}), registry.All())
	if err != nil {
		t.Fatal(err)
	}
	fair := map[string]string{}
	for _, task := range c.Tasks {
		if f := task.Config.Fair; f != nil {
			fair[task.Type] = fmt.Sprintf("cap %d weights %v seq %v block %v shards %d", f.Capacity, f.Weights, f.Sequence, f.BlockOnFailure, f.Shards)
		}
	}
	if fair["rebuild-cache"] != "cap 16 weights map[gold:5 silver:2] seq false block false shards 4" ||
		fair["reserve-stock"] != "cap 0 weights map[] seq true block true shards 0" {
		t.Fatalf("fair %v", fair)
	}
	for _, task := range registry.All() {
		if task.Config.Fair != nil {
			t.Fatalf("the registry changed: %s is fair", task.Type)
		}
	}
	for _, bad := range []string{"rebuild-cache=weight:gold", "rebuild-cache=weight:gold=0", "rebuild-cache=capacity:-1",
		"rebuild-cache=sequence:yes", "rebuild-cache=on_failure:retry", "rebuild-cache=shards:0", "rebuild-cache=shards:65"} {
		_, err := config.FromLookup(lookupFrom(map[string]string{"TASK_LIMITS": bad}), registry.All())
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Var != "TASK_LIMITS" {
			t.Errorf("TASK_LIMITS=%q: %v", bad, err)
		}
	}
}
