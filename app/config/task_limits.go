package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jobguard/jobguard/tasks"
)

// applyTaskLimits overrides the limits per key of the listed task types (TASK_LIMITS):
// "type=concurrency:N,rate:R/PERIOD,burst:B;type2=..." (each part optional; 0 turns one off). The
// key a limit counts by stays the task's own (middleware.Limit.Key, in code). It returns a copy of
// list; a type not in it, or a bad part, is an error.
func applyTaskLimits(v string, list []tasks.Task) ([]tasks.Task, error) {
	out := slices.Clone(list)
	for _, entry := range strings.Split(v, ";") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		typ, parts, ok := strings.Cut(entry, "=")
		i := slices.IndexFunc(out, func(t tasks.Task) bool { return t.Type == strings.TrimSpace(typ) })
		if !ok || i < 0 {
			return nil, fmt.Errorf("%q does not name a task type (want type=concurrency:N,rate:R/1s,burst:B)", typ)
		}
		lim := out[i].Config.Limit
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
			default:
				return nil, fmt.Errorf("%s: %q is not concurrency:N, rate:R/PERIOD or burst:B", typ, part)
			}
		}
		out[i].Config.Limit = lim
	}
	return out, nil
}
