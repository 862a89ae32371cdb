package app

import (
	"errors"
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
