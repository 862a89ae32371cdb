// Package benchpeers is make bench-peers: the same workload on jobguard and on the queues a user
// would pick instead (bare asynq, BullMQ, River), each system's worker and producer a process of
// its own on a datastore of its own, the systems interleaved in rotating order over rounds, and
// the figures printed side by side with jobguard's ratio to each peer. docs/BENCHMARKS.md says
// how to read them. Nothing public imports it; internal/benchpeers/cmd/benchpeers runs it.
package benchpeers

import (
	"cmp"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Config is one run's sizes and systems; each field names its variable, and its zero value
// means the default written beside it.
type Config struct {
	// Rounds each system runs every phase (BENCH_ROUNDS, default 3).
	Rounds int
	// Jobs each drain runs, enqueued before the worker starts (BENCH_JOBS, default 20000).
	Jobs int
	// Inserts the enqueue phase times (BENCH_INSERTS, default 10000).
	Inserts int
	// Concurrency is the worker's handlers and the enqueue's callers (BENCH_CONCURRENCY, default 50).
	Concurrency int
	// LatencyJobs the latency phase enqueues at LatencyRate while a worker runs
	// (BENCH_LATENCY_JOBS, default 2000; 0 in the variable leaves the phase out).
	LatencyJobs int
	// LatencyRate is the latency phase's inserts a second (BENCH_LATENCY_RATE, default 500).
	LatencyRate int
	// Systems are the names of the systems to run, in order (BENCH_SYSTEMS, comma-separated;
	// default every system of Systems()).
	Systems []string
	// BullMQVersion is what npm installs (BULLMQ_VERSION, default 5.81.5, the newest of BullMQ 5).
	BullMQVersion string
	// Root is the main module's directory (default the working directory).
	Root string
	// skipLatency is set when BENCH_LATENCY_JOBS is 0.
	skipLatency bool
}

// ConfigError names the variable whose value is wrong.
type ConfigError struct {
	Var string
	Err error
}

func (e *ConfigError) Error() string { return fmt.Sprintf("benchpeers: %s: %v", e.Var, e.Err) }
func (e *ConfigError) Unwrap() error { return e.Err }

// FromEnv reads the configuration from the environment and validates it.
func FromEnv() (Config, error) {
	var c Config
	for _, v := range []struct {
		name string
		to   *int
	}{
		{"BENCH_ROUNDS", &c.Rounds}, {"BENCH_JOBS", &c.Jobs}, {"BENCH_INSERTS", &c.Inserts},
		{"BENCH_CONCURRENCY", &c.Concurrency}, {"BENCH_LATENCY_JOBS", &c.LatencyJobs}, {"BENCH_LATENCY_RATE", &c.LatencyRate},
	} {
		s, ok := os.LookupEnv(v.name)
		if !ok || s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return c, &ConfigError{Var: v.name, Err: fmt.Errorf("%q is not a count", s)}
		}
		*v.to = n
	}
	c.skipLatency = os.Getenv("BENCH_LATENCY_JOBS") == "0"
	if s := os.Getenv("BENCH_SYSTEMS"); s != "" {
		for _, name := range strings.Split(s, ",") {
			c.Systems = append(c.Systems, strings.TrimSpace(name))
		}
	}
	c.BullMQVersion = os.Getenv("BULLMQ_VERSION")
	c = c.withDefaults()
	return c, c.Validate()
}

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Rounds, 3)
	def(&c.Jobs, 20000)
	def(&c.Inserts, 10000)
	def(&c.Concurrency, 50)
	def(&c.LatencyJobs, 2000)
	def(&c.LatencyRate, 500)
	if len(c.Systems) == 0 {
		for _, s := range Systems() {
			c.Systems = append(c.Systems, s.Name)
		}
	}
	c.BullMQVersion = cmp.Or(c.BullMQVersion, "5.81.5")
	c.Root = cmp.Or(c.Root, ".")
	return c
}

// Validate reports the first variable whose value cannot run.
func (c Config) Validate() error {
	for _, name := range c.Systems {
		if _, ok := systemNamed(name); !ok {
			return &ConfigError{Var: "BENCH_SYSTEMS", Err: fmt.Errorf("no system %q (there are %s)", name, strings.Join(systemNames(), ", "))}
		}
	}
	if _, err := os.Stat(c.Root + "/bench/peers/go.mod"); err != nil {
		return &ConfigError{Var: "working directory", Err: fmt.Errorf("run from the repository's root (make bench-peers): %w", err)}
	}
	return nil
}
