package config

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jobguard/jobguard/middleware"
	"github.com/jobguard/jobguard/tasks"
)

// applyTaskLimits overrides the limits per key of the listed task types (TASK_LIMITS):
// "type=concurrency:N,rate:R/PERIOD,burst:B;type2=..." (each part optional; 0 turns one off), and
// its fair dispatch (fair:on, capacity:N, weight:KEY=W, sequence:on, on_failure:block|skip;
// applyFairPart). The key a limit counts by stays the task's own (middleware.Limit.Key, in code).
// It returns a copy of list; a type not in it, or a bad part, is an error.
func applyTaskLimits(v string, list []tasks.Task) ([]tasks.Task, error) {
	out := slices.Clone(list)
	for _, entry := range taskEntries(v, ";") {
		typ, parts, ok := strings.Cut(entry, "=")
		i := taskIndex(out, typ)
		if !ok || i < 0 {
			return nil, fmt.Errorf("%q does not name a task type (want type=concurrency:N,rate:R/1s,burst:B)", typ)
		}
		lim, fair := out[i].Config.Limit, out[i].Config.Fair
		for _, part := range strings.Split(parts, ",") {
			name, val, _ := strings.Cut(strings.TrimSpace(part), ":")
			switch name {
			case "concurrency", "burst":
				n, err := strconv.Atoi(val)
				if err != nil || n < 0 || n > 1_000_000 {
					return nil, fmt.Errorf("%s: %s %q is not 0-1000000", typ, name, val)
				}
				if name == "concurrency" {
					lim.Concurrency = n
				} else {
					lim.Burst = n
				}
			case "rate":
				r, per, hasPer := strings.Cut(val, "/")
				n, err := strconv.Atoi(r)
				if err != nil || n < 0 || n > 1_000_000 {
					return nil, fmt.Errorf("%s: rate %q is not 0-1000000 per period", typ, val)
				}
				d := time.Second
				if hasPer {
					if d, err = time.ParseDuration(per); err != nil || d < time.Millisecond || d > 24*time.Hour {
						return nil, fmt.Errorf("%s: rate period %q is not a duration of 1ms-24h", typ, per)
					}
				}
				if n > 0 && d/time.Duration(n) < time.Millisecond {
					return nil, fmt.Errorf("%s: rate %q is more than one start per millisecond", typ, val)
				}
				lim.Rate, lim.Per = n, d
			case "fair", "capacity", "weight", "sequence", "on_failure":
				f, err := applyFairPart(fair, name, val)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", typ, err)
				}
				fair = f
			default:
				return nil, fmt.Errorf("%s: %q is not concurrency:N, rate:R/PERIOD, burst:B or a fair part (fair:on, capacity:N, "+
					"weight:KEY=W, sequence:on, on_failure:block)", typ, part)
			}
		}
		out[i].Config.Limit, out[i].Config.Fair = lim, fair
	}
	return out, nil
}

// applyFairPart applies one fair-dispatch part of TASK_LIMITS to a copy of f (docs/FAIRNESS.md):
// fair:on|off, capacity:N, weight:KEY=W (one per key), sequence:on|off, on_failure:block|skip.
// Any part but fair:off turns fair dispatch on.
func applyFairPart(f *middleware.Fair, name, val string) (*middleware.Fair, error) {
	c := middleware.Fair{}
	if f != nil {
		c = *f
		c.Weights = maps.Clone(f.Weights)
	}
	on := func(v string) (bool, error) {
		switch v {
		case "on":
			return true, nil
		case "off":
			return false, nil
		}
		return false, fmt.Errorf("%s %q is not on or off", name, v)
	}
	switch name {
	case "fair":
		keep, err := on(val)
		if err != nil || !keep {
			return nil, err
		}
	case "capacity":
		n, err := strconv.Atoi(val)
		if err != nil || n < 0 || n > 1_000_000 {
			return nil, fmt.Errorf("capacity %q is not 0-1000000", val)
		}
		c.Capacity = n
	case "weight":
		key, w, ok := strings.Cut(val, "=")
		n, err := strconv.Atoi(w)
		if !ok || key == "" || err != nil || n < 1 || n > 1000 {
			return nil, fmt.Errorf("weight %q is not KEY=W with W 1-1000", val)
		}
		if c.Weights == nil {
			c.Weights = map[string]int{}
		}
		c.Weights[key] = n
	case "sequence":
		v, err := on(val)
		if err != nil {
			return nil, err
		}
		c.Sequence = v
	case "on_failure":
		if val != "block" && val != "skip" {
			return nil, fmt.Errorf("on_failure %q is not block or skip", val)
		}
		c.BlockOnFailure = val == "block"
	}
	return &c, nil
}
