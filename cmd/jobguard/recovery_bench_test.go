package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// TestHelperBareAsynqWorker is not a test: it is the bare asynq worker that
// BenchmarkRecoveryAfterKill kills. It prints STARTED when its handler runs, then hangs.
func TestHelperBareAsynqWorker(t *testing.T) {
	url := os.Getenv("BARE_ASYNQ_REDIS")
	if url == "" {
		t.Skip("child process of BenchmarkRecoveryAfterKill")
	}
	opt, _ := asynq.ParseRedisURI(url)
	srv := asynq.NewServer(opt, asynq.Config{Concurrency: 1, Logger: testsupport.QuietAsynq{}, LogLevel: asynq.FatalLevel})
	_ = srv.Run(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		fmt.Println("STARTED")
		select {}
	}))
}

// bareRecovery measures, for bare asynq, the time from kill -9 of the worker running a task to
// that task completing on another worker.
func bareRecovery(b *testing.B) time.Duration {
	db := redistest.NewDB(b)
	client := asynq.NewClientFromRedisClient(db.Client)
	if _, err := client.Enqueue(asynq.NewTask("work", nil)); err != nil {
		b.Fatal(err)
	}
	child := exec.Command(os.Args[0], "-test.run=^TestHelperBareAsynqWorker$")
	child.Env = append(os.Environ(), "BARE_ASYNQ_REDIS="+db.URL())
	out, _ := child.StdoutPipe()
	if err := child.Start(); err != nil {
		b.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "STARTED" {
	}
	_ = child.Process.Signal(syscall.SIGKILL)
	_ = child.Wait()
	killed := time.Now()
	done := make(chan time.Time, 1)
	srv := asynq.NewServerFromRedisClient(db.Client, asynq.Config{Concurrency: 1, Logger: testsupport.QuietAsynq{}, LogLevel: asynq.FatalLevel})
	if err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { done <- time.Now(); return nil })); err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	select {
	case at := <-done:
		return at.Sub(killed)
	case <-time.After(5 * time.Minute):
		b.Fatal("bare asynq never redelivered within 5 minutes")
	}
	return 0
}

// jobguardRecovery measures the same for jobguard with LEASE_TTL=5s: two worker processes, kill -9
// of the one running the job.
func jobguardRecovery(b *testing.B) time.Duration {
	src := newUpstream(b)
	env := []string{"REDIS_URL=" + redistest.NewDB(b).URL(), "LEASE_TTL=5s", "REBUILD_SOURCE_URL=" + src.URL}
	api := startProc(b, []string{"api"}, env...)
	workers := []*proc{startProc(b, []string{"worker"}, env...), startProc(b, []string{"worker"}, env...)}
	id := enqueueRebuild(b, api)
	<-src.first
	s := api.job(b, id)
	for _, w := range workers {
		if strings.HasSuffix(s.WorkerID, "-"+strconv.Itoa(w.cmd.Process.Pid)) {
			_ = w.cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	killed := time.Now()
	_, _ = waitDone(b, api, id, time.Minute)
	return time.Since(killed)
}

// BenchmarkRecoveryAfterKill: time from kill -9 of a worker mid-task to the task done elsewhere,
// bare asynq against jobguard (LEASE_TTL=5s), side by side. Slow (bare asynq takes 60-120 s per
// sample): go test -run '^$' -bench RecoveryAfterKill -benchtime 1x ./cmd/jobguard/
func BenchmarkRecoveryAfterKill(b *testing.B) {
	samples := 2
	if s, err := strconv.Atoi(os.Getenv("RECOVERY_SAMPLES")); err == nil && s > 0 {
		samples = s
	}
	var bare, ours []time.Duration
	for i := 0; i < samples; i++ {
		ours = append(ours, jobguardRecovery(b))
		bare = append(bare, bareRecovery(b))
	}
	p50 := func(d []time.Duration) time.Duration {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return d[len(d)/2]
	}
	b.ReportMetric(p50(bare).Seconds(), "bare-p50-s")
	b.ReportMetric(bare[len(bare)-1].Seconds(), "bare-max-s")
	b.ReportMetric(p50(ours).Seconds(), "jobguard-p50-s")
	b.ReportMetric(ours[len(ours)-1].Seconds(), "jobguard-max-s")
	b.ReportMetric(p50(bare).Seconds()/p50(ours).Seconds(), "speedup")
}
