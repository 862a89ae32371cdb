package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/redistest"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "jobguard-bin-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "jobguard")
	// -trimpath and CGO_ENABLED=0 as the release, Dockerfile and VCS builds of this package's
	// tests: the four builds then share every compiled package and differ only in their link.
	build := exec.Command("go", "build", "-trimpath", "-o", binary, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		panic("build: " + err.Error() + "\n" + string(out))
	}
	// Not a defer: redistest.Main ends with os.Exit, which runs none.
	redistest.AtExit(func() { _ = os.RemoveAll(dir) })
	redistest.Main(m)
}

func env(kv ...string) []string {
	return append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, kv...)
}

func TestBadConfigurationNamesTheVariable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ env, want string }{
		{"WORKER_CONCURRENCY=abc", "WORKER_CONCURRENCY"},
		{"REDIS_URL=redis://:pw@localhost:port/x", "REDIS_URL"},
		{"LEASE_TTL=forever", "LEASE_TTL"},
	} {
		cmd := exec.Command(binary)
		cmd.Env = env(tc.env)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if err == nil || !asExit(err, &exit) || exit.ExitCode() == 0 {
			t.Fatalf("%s: exit %v, want non-zero", tc.env, err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
			t.Fatalf("%s: want one line naming %s, got %q", tc.env, tc.want, out)
		}
	}
}

func asExit(err error, target **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*target = e
	return ok
}

// proc is a jobguard process whose log lines are read until it reports its address.
type proc struct {
	cmd  *exec.Cmd
	addr string
	logs chan string
}

func startProc(t testing.TB, args []string, kv ...string) *proc {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = env(append([]string{"HTTP_ADDR=127.0.0.1:0", "SHUTDOWN_TIMEOUT=3s"}, kv...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	p := &proc{cmd: cmd, logs: make(chan string, 1000)}
	started := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			var ev struct{ Message, Addr string }
			if json.Unmarshal([]byte(line), &ev) == nil && ev.Message == "jobguard started" {
				started <- ev.Addr
			}
			select {
			case p.logs <- line:
			default:
			}
		}
		close(p.logs)
	}()
	select {
	case p.addr = <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("jobguard did not start within 20s")
	}
	return p
}

func (p *proc) get(t testing.TB, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + p.addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// sigterm stops the process and asserts it exits 0 within the shutdown timeout plus slack.
func (p *proc) sigterm(t *testing.T) {
	t.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
		if d := time.Since(start); d > 3*time.Second+2*time.Second {
			t.Fatalf("took %s to stop, shutdown timeout is 3s", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit within 10s of SIGTERM")
	}
}

func TestEmbeddedRedisOneCommand(t *testing.T) {
	t.Parallel()
	p := startProc(t, nil)
	for _, path := range []string{"/healthz", "/readyz", "/monitoring/"} {
		if code, body := p.get(t, path); code != 200 {
			t.Fatalf("%s: %d %.200s", path, code, body)
		}
	}
	warned := false
	for len(p.logs) > 0 {
		if strings.Contains(<-p.logs, "EMBEDDED IN-MEMORY Redis") {
			warned = true
		}
	}
	if !warned {
		t.Error("no loud warning about the embedded Redis")
	}
	p.sigterm(t)
}

func TestSeparateAPIAndWorkerProcesses(t *testing.T) {
	t.Parallel()
	url := redistest.NewDB(t).URL()
	api := startProc(t, []string{"api"}, "REDIS_URL="+url)
	worker := startProc(t, []string{"worker"}, "REDIS_URL="+url)
	if code, _ := api.get(t, "/monitoring/"); code != 200 {
		t.Fatalf("api UI: %d", code)
	}
	if code, _ := worker.get(t, "/readyz"); code != 200 {
		t.Fatalf("worker readyz: %d", code)
	}
	if code, _ := worker.get(t, "/monitoring/"); code != 404 {
		t.Fatalf("worker UI: %d, want 404", code)
	}
	worker.sigterm(t)
	api.sigterm(t)
}
