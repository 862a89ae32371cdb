package app

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/tasks/registry"
)

func runMain(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(context.Background(), args, lookupFrom(env), &out, &errOut, registry.All())
	return code, out.String(), errOut.String()
}

func TestHealthcheckAgainstARunningApp(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAll, map[string]string{"ADMIN_ADDR": "127.0.0.1:0"})
	_, adminPort, _ := net.SplitHostPort(r.AdminAddr())
	_, httpPort, _ := net.SplitHostPort(r.Addr())
	for name, env := range map[string]map[string]string{
		"HEALTHCHECK_URL":             {"HEALTHCHECK_URL": "http://" + r.AdminAddr() + "/readyz"},
		"ADMIN_ADDR's port":           {"HTTP_ADDR": "0.0.0.0:1", "ADMIN_ADDR": "0.0.0.0:" + adminPort},
		"liveness by HEALTHCHECK_URL": {"HEALTHCHECK_URL": "http://" + r.AdminAddr() + "/healthz"},
	} {
		if code, _, stderr := runMain(t, env, "healthcheck"); code != 0 {
			t.Errorf("%s: exit %d (%s), want 0", name, code, stderr)
		}
	}
	// HTTP_ADDR's port serves no probe when ADMIN_ADDR is set: 404 is unhealthy.
	if code, _, stderr := runMain(t, map[string]string{"HTTP_ADDR": "0.0.0.0:" + httpPort}, "healthcheck"); code != 1 || !strings.Contains(stderr, "404") {
		t.Errorf("probe on the API port: exit %d (%s), want 1 naming 404", code, stderr)
	}
}

func TestHealthcheckDefaultsToHTTPAddrsPort(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, nil)
	_, port, _ := net.SplitHostPort(r.Addr())
	if code, _, stderr := runMain(t, map[string]string{"HTTP_ADDR": "0.0.0.0:" + port}, "healthcheck"); code != 0 {
		t.Fatalf("exit %d (%s), want 0", code, stderr)
	}
}

func TestHealthcheckFailsOnADeadPort(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	code, _, stderr := runMain(t, map[string]string{"HTTP_ADDR": addr}, "healthcheck")
	if code != 1 || !strings.Contains(stderr, "no answer") {
		t.Fatalf("dead port: exit %d (%s), want 1", code, stderr)
	}
}

func TestHealthcheckFailsOnNot200AndOnSlowness(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	defer close(release)
	if code, _, stderr := runMain(t, map[string]string{"HEALTHCHECK_URL": srv.URL + "/readyz"}, "healthcheck"); code != 1 || !strings.Contains(stderr, "503") {
		t.Errorf("503: exit %d (%s), want 1", code, stderr)
	}
	start := time.Now()
	code, _, _ := runMain(t, map[string]string{"HEALTHCHECK_URL": srv.URL + "/slow"}, "healthcheck")
	if took := time.Since(start); code != 1 || took > healthcheckTimeout+time.Second {
		t.Errorf("a probe that hangs: exit %d after %s, want 1 within about %s", code, took, healthcheckTimeout)
	}
}
