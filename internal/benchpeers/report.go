package benchpeers

import (
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/jobguard/jobguard/internal/benchfig"
)

// measure is one row of the tables: the key phases write, and what the row says.
type measure struct{ key, label string }

func measures(cfg Config) []measure {
	ms := []measure{
		{"noop", "drain, no-op handler: jobs/s"},
		{"noop.worker", "  worker CPU µs per job"},
		{"noop.store", "  datastore CPU µs per job"},
		{"io5", "drain, 5 ms handler: jobs/s"},
		{"io5.worker", "  worker CPU µs per job"},
		{"io5.store", "  datastore CPU µs per job"},
		{"noop.bytes", "datastore bytes per finished job kept"},
		{"enqueue", fmt.Sprintf("enqueue, %d callers: inserts/s", cfg.Concurrency)},
		{"enqueue.p50", "  insert p50 ms"},
		{"enqueue.p99", "  insert p99 ms"},
		{"enqueue.producer", "  producer CPU µs per insert"},
		{"enqueue.store", "  datastore CPU µs per insert"},
	}
	if !cfg.skipLatency {
		ms = append(ms,
			measure{"latency.p50", fmt.Sprintf("wait from enqueue to start at %d/s: p50 ms", cfg.LatencyRate)},
			measure{"latency.p99", "  p99 ms"})
	}
	return ms
}

// report writes the run's header, one table of every system's medians and spreads, and one of
// the ratios of each of jobguard's stacks to each peer: the median and spread of the ratios of
// the same round, so that a round's load falls on both sides of each ratio.
func report(w io.Writer, cfg Config, systems []prepared, versions []string, results map[string][]figures) {
	commit, _ := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	latency := fmt.Sprintf("; latency: %d jobs at %d/s", cfg.LatencyJobs, cfg.LatencyRate)
	if cfg.skipLatency {
		latency = ""
	}
	fmt.Fprintf(w, "\nmake bench-peers at %s, %s: %d rounds, systems in rotating order; drains of %d jobs by one worker process of concurrency %d; %d inserts from %d callers%s. Medians (min-max over rounds).\n",
		strings.TrimSpace(string(commit)), time.Now().UTC().Format("2006-01-02"), cfg.Rounds, cfg.Jobs, cfg.Concurrency, cfg.Inserts, cfg.Concurrency, latency)
	fmt.Fprintf(w, "%s\n\n", strings.Join(versions, "; "))

	fmt.Fprint(w, "| measure |")
	for _, s := range systems {
		fmt.Fprintf(w, " %s (%s) |", s.Name, s.Store)
	}
	fmt.Fprint(w, "\n|---|"+strings.Repeat("---|", len(systems))+"\n")
	for _, m := range measures(cfg) {
		fmt.Fprintf(w, "| %s |", m.label)
		for _, s := range systems {
			fmt.Fprintf(w, " %s |", benchfig.Summary(column(results[s.Name], m.key)))
		}
		fmt.Fprintln(w)
	}

	type pair struct{ ours, peer prepared }
	var pairs []pair
	for _, o := range systems {
		for _, p := range systems {
			if o.Ours && !p.Ours {
				pairs = append(pairs, pair{o, p})
			}
		}
	}
	if len(pairs) == 0 {
		return
	}
	fmt.Fprint(w, "\n| measure |")
	for _, p := range pairs {
		fmt.Fprintf(w, " %s / %s |", p.ours.Name, p.peer.Name)
	}
	fmt.Fprint(w, "\n|---|"+strings.Repeat("---|", len(pairs))+"\n")
	for _, m := range measures(cfg) {
		fmt.Fprintf(w, "| %s |", m.label)
		for _, p := range pairs {
			fmt.Fprintf(w, " %s |", ratios(results[p.ours.Name], results[p.peer.Name], m.key))
		}
		fmt.Fprintln(w)
	}
}

// column is one measure's value in every round.
func column(rounds []figures, key string) []float64 {
	var v []float64
	for _, f := range rounds {
		if x, ok := f[key]; ok {
			v = append(v, x)
		}
	}
	return v
}

// ratios is "median (min-max)" of ours/peer round by round, as "0.45x (0.41-0.50)".
func ratios(ours, peer []figures, key string) string {
	var r []float64
	for i := range min(len(ours), len(peer)) {
		a, okA := ours[i][key]
		b, okB := peer[i][key]
		if okA && okB && b != 0 {
			r = append(r, a/b)
		}
	}
	if len(r) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx (%.2f-%.2f)", benchfig.Median(r), slices.Min(r), slices.Max(r))
}
