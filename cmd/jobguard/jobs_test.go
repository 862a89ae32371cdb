package main

import (
	"bytes"
	"errors"
	"net"
	"os/exec"
	"strings"
	"testing"

	"github.com/jobguard/jobguard/internal/redistest"
)

// jobsCmd runs the binary's jobs command with the environment kv and returns its exit code,
// stdout and stderr.
func jobsCmd(t testing.TB, kv []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"jobs"}, args...)...)
	cmd.Env = env(kv...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

// The binary's jobs command goes through the API of a running process: with only HTTP_ADDR (the
// port of the instance it was started on, as on a host that runs one) and no Redis address, it
// lists every tenant's jobs of an open API and cancels one; its exit codes are the process's (0, 1
// no answer, 2 usage, 3 not found, 4 conflict); jobguard help shows it.
func TestJobsCommandExitCodes(t *testing.T) {
	t.Parallel()
	api := startProc(t, []string{"api"}, "REDIS_URL="+redistest.NewDB(t).URL())
	id := enqueueRebuild(t, api) // no worker: it stays queued
	_, port, _ := net.SplitHostPort(api.addr)
	local := []string{"HTTP_ADDR=127.0.0.1:" + port}
	if code, out, errOut := jobsCmd(t, local, "list", "--output", "json"); code != 0 || !strings.Contains(out, `"job_id": "`+id+`"`) {
		t.Fatalf("list: exit %d %s %s", code, out, errOut)
	}
	byURL := []string{"JOBGUARD_URL=http://" + api.addr}
	if code, out, errOut := jobsCmd(t, byURL, "cancel", id); code != 0 || !strings.HasPrefix(out, "cancelled "+id+" (was queued") {
		t.Fatalf("cancel: exit %d %q %q", code, out, errOut)
	}
	if s := api.job(t, id); s.Status != "cancelled" {
		t.Fatalf("after the cancel the API says %+v", s)
	}
	if code, _, errOut := jobsCmd(t, byURL, "cancel", id); code != 4 {
		t.Fatalf("second cancel: exit %d %q, want 4", code, errOut)
	}
	if code, _, errOut := jobsCmd(t, byURL, "show", "0123456789abcdef-00000000000000000000000000ff"); code != 3 {
		t.Fatalf("show of no job: exit %d %q, want 3", code, errOut)
	}
	if code, _, errOut := jobsCmd(t, byURL, "list", "--limit", "500"); code != 2 || !strings.Contains(errOut, "usage: jobguard jobs") {
		t.Fatalf("bad limit: exit %d %q, want 2", code, errOut)
	}
	if code, out, errOut := jobsCmd(t, []string{"JOBGUARD_URL=http://127.0.0.1:1"}, "list"); code != 1 || out != "" || strings.Count(errOut, "\n") != 1 ||
		!strings.Contains(errOut, "no answer from http://127.0.0.1:1") || strings.Contains(errOut, "goroutine") {
		t.Fatalf("no server: exit %d %q %q, want 1 and one line", code, out, errOut)
	}
	help, err := exec.Command(binary, "help").Output()
	if err != nil || !bytes.Contains(help, []byte("jobguard jobs list")) {
		t.Fatalf("help: %v %s", err, help)
	}
	for _, arg := range []string{"-v", "--version", "version"} {
		if out, err := exec.Command(binary, arg).Output(); err != nil || !strings.HasPrefix(string(out), "jobguard ") {
			t.Fatalf("%s: %v %q", arg, err, out)
		}
	}
}
