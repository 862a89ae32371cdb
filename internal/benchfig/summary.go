package benchfig

import (
	"fmt"
	"os"
	"strings"
)

// The summary table: each side-by-side benchmark adds its headline figures as rows to the file
// BENCH_TABLE names (when set), so that `make bench` prints every figure the README quotes in one
// table at the end (scripts/bench-table.sh), however many packages and benchmarks it ran.

// Row is one line of the summary: what is measured, each side's median and spread (Summary),
// and their ratio.
type Row struct {
	Benchmark, Measure, Baseline, Jobguard, Ratio string
}

// AddRow appends r to the summary file, if BENCH_TABLE names one. A failure to write is reported
// on stderr: the benchmark's own output stands.
func AddRow(r Row) {
	path := os.Getenv("BENCH_TABLE")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchfig:", err)
		return
	}
	defer f.Close()
	cells := []string{r.Benchmark, r.Measure, r.Baseline, r.Jobguard, r.Ratio}
	for i, c := range cells {
		cells[i] = strings.ReplaceAll(c, "|", "/")
	}
	if _, err := fmt.Fprintf(f, "| %s |\n", strings.Join(cells, " | ")); err != nil {
		fmt.Fprintln(os.Stderr, "benchfig:", err)
	}
}
