package config

import (
	"fmt"
	"maps"
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
	return eachTaskEntry(v, ";", list, func(out []tasks.Task, entry string) error {
		typ, parts, ok := strings.Cut(entry, "=")
		i := taskIndex(out, typ)
		if !ok || i < 0 {
			return fmt.Errorf("%q does not name a task type (want type=concurrency:N,rate:R/1s,burst:B)", typ)
		}
		lim, fair := out[i].Config.Limit, out[i].Config.Fair
		for _, part := range strings.Split(parts, ",") {
			name, val, _ := strings.Cut(strings.TrimSpace(part), ":")
			var err error
			switch name {
			case "concurrency", "burst", "rate":
				err = applyLimitPart(&lim, name, val)
			case "fair", "capacity", "weight", "sequence", "on_failure", "shards":
				fair, err = applyFairPart(fair, name, val)
			default:
				return fmt.Errorf("%s: %q is not concurrency:N, rate:R/PERIOD, burst:B or a fair part (fair:on, capacity:N, "+
					"weight:KEY=W, sequence:on, on_failure:block)", typ, part)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", typ, err)
			}
		}
		out[i].Config.Limit, out[i].Config.Fair = lim, fair
		return nil
	})
}

// applyLimitPart applies one limit part of TASK_LIMITS to lim: concurrency:N, burst:B or
// rate:R[/PERIOD] (0 turns one off).
func applyLimitPart(lim *middleware.Limit, name, val string) error {
	if name == "rate" {
		r, per, hasPer := strings.Cut(val, "/")
		n, err := strconv.Atoi(r)
		if err != nil || n < 0 || n > 1_000_000 {
			return fmt.Errorf("rate %q is not 0-1000000 per period", val)
		}
		d := time.Second
		if hasPer {
			if d, err = time.ParseDuration(per); err != nil || d < time.Millisecond || d > 24*time.Hour {
				return fmt.Errorf("rate period %q is not a duration of 1ms-24h", per)
			}
		}
		if n > 0 && d/time.Duration(n) < time.Millisecond {
			return fmt.Errorf("rate %q is more than one start per millisecond", val)
		}
		lim.Rate, lim.Per = n, d
		return nil
	}
	n, err := strconv.Atoi(val)
	if err != nil || n < 0 || n > 1_000_000 {
		return fmt.Errorf("%s %q is not 0-1000000", name, val)
	}
	if name == "concurrency" {
		lim.Concurrency = n
	} else {
		lim.Burst = n
	}
	return nil
}

// maxFairShards bounds a fair type's shards (each a slot every sweep and pump visits).
const maxFairShards = 64

// applyFairPart applies one fair-dispatch part of TASK_LIMITS to a copy of f (docs/FAIRNESS.md):
// fair:on|off, capacity:N, weight:KEY=W (one per key), sequence:on|off, on_failure:block|skip,
// shards:N.
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
	case "shards":
		n, err := strconv.Atoi(val)
		if err != nil || n < 1 || n > maxFairShards {
			return nil, fmt.Errorf("shards %q is not 1-%d", val, maxFairShards)
		}
		c.Shards = n
	}
	return &c, nil
}
