package cli_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jobguard/jobguard/app/cli"
)

func healthcheck(t *testing.T, env map[string]string) (int, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Healthcheck(context.Background(), cli.Env{Lookup: lookupFrom(env), Stdout: &out, Stderr: &errOut})
	return code, errOut.String()
}

func TestHealthcheckAgainstARunningApp(t *testing.T) {
	t.Parallel()
	s := startAPI(t, map[string]string{"ADMIN_ADDR": "127.0.0.1:0"})
	_, adminPort, _ := net.SplitHostPort(s.AdminAddr())
	_, httpPort, _ := net.SplitHostPort(s.Addr())
	for name, env := range map[string]map[string]string{
		"HEALTHCHECK_URL":             {"HEALTHCHECK_URL": "http://" + s.AdminAddr() + "/readyz"},
		"ADMIN_ADDR's port":           {"HTTP_ADDR": "0.0.0.0:1", "ADMIN_ADDR": "0.0.0.0:" + adminPort},
		"liveness by HEALTHCHECK_URL": {"HEALTHCHECK_URL": "http://" + s.AdminAddr() + "/healthz"},
	} {
		if code, stderr := healthcheck(t, env); code != 0 {
			t.Errorf("%s: exit %d (%s), want 0", name, code, stderr)
		}
	}
	// HTTP_ADDR's port serves no probe when ADMIN_ADDR is set: 404 is unhealthy.
	if code, stderr := healthcheck(t, map[string]string{"HTTP_ADDR": "0.0.0.0:" + httpPort}); code != 1 || !strings.Contains(stderr, "404") {
		t.Errorf("probe on the API port: exit %d (%s), want 1 naming 404", code, stderr)
	}
}

func TestHealthcheckDefaultsToHTTPAddrsPort(t *testing.T) {
	t.Parallel()
	s := startAPI(t, nil)
	_, port, _ := net.SplitHostPort(s.Addr())
	if code, stderr := healthcheck(t, map[string]string{"HTTP_ADDR": "0.0.0.0:" + port}); code != 0 {
		t.Fatalf("exit %d (%s), want 0", code, stderr)
	}
}

func TestHealthcheckFailsOnADeadPort(t *testing.T) {
	t.Parallel()
	addr := strings.TrimPrefix(deadURL(t), "http://")
	if code, stderr := healthcheck(t, map[string]string{"HTTP_ADDR": addr}); code != 1 || !strings.Contains(stderr, "no answer") {
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
	if code, stderr := healthcheck(t, map[string]string{"HEALTHCHECK_URL": srv.URL + "/readyz"}); code != 1 || !strings.Contains(stderr, "503") {
		t.Errorf("503: exit %d (%s), want 1", code, stderr)
	}
	// A probe that hangs ends on HealthcheckTimeout's deadline, and says so.
	if code, stderr := healthcheck(t, map[string]string{"HEALTHCHECK_URL": srv.URL + "/slow"}); code != 1 || !strings.Contains(stderr, "deadline exceeded") {
		t.Errorf("a probe that hangs: exit %d (%s), want 1 naming the deadline", code, stderr)
	}
}
