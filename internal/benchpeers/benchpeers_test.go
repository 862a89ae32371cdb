package benchpeers

import (
	"errors"
	"os"
	"testing"
	"time"
)

func TestProcessCPUCountsThisProcess(t *testing.T) {
	t.Parallel()
	before, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Spin until /proc shows 20 ms more CPU (a loaded machine gives this process less of each
	// wall-clock second), or fail after 10 s of spinning: the reading never moved.
	var after float64
	for start := time.Now(); ; {
		if after, err = processCPU(os.Getpid()); err != nil {
			t.Fatal(err)
		}
		if after-before >= 0.02 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("10 s of spinning read as %.3f s of CPU", after-before)
		}
	}
	tree, err := treeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if tree < after {
		t.Fatalf("the process tree's CPU %.3f s is less than the process's %.3f s", tree, after)
	}
}

func TestRatiosAreOfTheSameRound(t *testing.T) {
	t.Parallel()
	ours := []figures{{"x": 1}, {"x": 4}, {"x": 3}}
	peer := []figures{{"x": 2}, {"x": 4}, {"x": 1}}
	if got, want := ratios(ours, peer, "x"), "1.00x (0.50-3.00)"; got != want {
		t.Fatalf("ratios = %q, want %q", got, want)
	}
	if got := ratios(ours, peer, "missing"); got != "-" {
		t.Fatalf("ratios of a measure no round has = %q, want -", got)
	}
}

func TestConfigNamesTheVariable(t *testing.T) {
	t.Setenv("BENCH_SYSTEMS", "asynq,sidekiq")
	_, err := FromEnv()
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Var != "BENCH_SYSTEMS" {
		t.Fatalf("FromEnv() = %v, want a ConfigError naming BENCH_SYSTEMS", err)
	}
	t.Setenv("BENCH_SYSTEMS", "")
	t.Setenv("BENCH_JOBS", "many")
	if _, err := FromEnv(); !errors.As(err, &ce) || ce.Var != "BENCH_JOBS" {
		t.Fatalf("FromEnv() = %v, want a ConfigError naming BENCH_JOBS", err)
	}
}
