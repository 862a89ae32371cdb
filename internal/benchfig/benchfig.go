// Package benchfig holds what the side-by-side benchmarks share: the median and spread of the
// figures of interleaved rounds, and how many rounds and tasks a run takes (BENCH_ROUNDS,
// BENCH_TASKS). Benchmarks that use it run with -benchtime 1x: b.N is not the measure.
package benchfig

import (
	"fmt"
	"os"
	"slices"
	"strconv"
)

// Median is the median of v (the mean of the middle two for an even count; 0 for none).
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// Summary is "median (min-max)", with as many decimals as the size of the figure asks.
func Summary(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	return fmt.Sprintf("%s (%s-%s)", Format(Median(v)), Format(slices.Min(v)), Format(slices.Max(v)))
}

// Format prints x with 0, 1 or 2 decimals as its size asks.
func Format(x float64) string {
	switch {
	case x >= 100:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case x >= 10:
		return strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strconv.FormatFloat(x, 'f', 2, 64)
}

// Ratio is "b/a" of the medians as "0.00x", "-" when a's median is 0.
func Ratio(a, b []float64) string {
	if Median(a) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", Median(b)/Median(a))
}

// Rounds is how many rounds each side runs: BENCH_ROUNDS, default 5.
func Rounds() int { return envInt("BENCH_ROUNDS", 5) }

// Tasks is how many tasks (or requests) a round runs: BENCH_TASKS, default def.
func Tasks(def int) int { return envInt("BENCH_TASKS", def) }

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}
