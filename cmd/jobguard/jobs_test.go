package main

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/jobguard/jobguard/internal/redistest"
)

// jobsCmd runs the binary's jobs command on redisURL and returns its exit code, stdout and stderr.
func jobsCmd(t testing.TB, redisURL string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"jobs"}, args...)...)
	cmd.Env = env("REDIS_URL=" + redisURL)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

// The binary's jobs command: its exit codes are the process's (0, 2 usage, 3 not found, 4
// conflict), it acts on a job an API process enqueued, and jobguard help shows it.
func TestJobsCommandExitCodes(t *testing.T) {
	t.Parallel()
	url := redistest.NewDB(t).URL()
	api := startProc(t, []string{"api"}, "REDIS_URL="+url)
	id := enqueueRebuild(t, api) // no worker: it stays queued
	if code, out, errOut := jobsCmd(t, url, "list", "--tenant", "t1", "--output", "json"); code != 0 || !strings.Contains(out, `"job_id": "`+id+`"`) {
		t.Fatalf("list: exit %d %s %s", code, out, errOut)
	}
	if code, out, errOut := jobsCmd(t, url, "cancel", id); code != 0 || !strings.HasPrefix(out, "cancelled "+id+" (was queued") {
		t.Fatalf("cancel: exit %d %q %q", code, out, errOut)
	}
	if s := api.job(t, id); s.Status != "cancelled" {
		t.Fatalf("after the cancel the API says %+v", s)
	}
	if code, _, errOut := jobsCmd(t, url, "cancel", id); code != 4 {
		t.Fatalf("second cancel: exit %d %q, want 4", code, errOut)
	}
	if code, _, errOut := jobsCmd(t, url, "get", "0123456789abcdef-00000000000000000000000000ff"); code != 3 {
		t.Fatalf("get of no job: exit %d %q, want 3", code, errOut)
	}
	if code, _, errOut := jobsCmd(t, url, "list", "--limit", "500"); code != 2 || !strings.Contains(errOut, "usage: jobguard jobs") {
		t.Fatalf("bad limit: exit %d %q, want 2", code, errOut)
	}
	help, err := exec.Command(binary, "help").Output()
	if err != nil || !bytes.Contains(help, []byte("jobguard jobs list")) {
		t.Fatalf("help: %v %s", err, help)
	}
}
