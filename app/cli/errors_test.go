package cli_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// deadURL is the URL of a port nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// A URL nothing answers on is exit 1 with one line saying where and why, no stack and no
// credentials of the URL; a URL that is not http(s) is a usage error.
func TestJobsUnreachableURLIsOneLine(t *testing.T) {
	t.Parallel()
	dead := deadURL(t)
	code, out, errOut := run(t, map[string]string{"JOBGUARD_URL": dead}, "list")
	want := "jobguard jobs list: no answer from " + dead + ": connection refused"
	if code != 1 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, want) || strings.Contains(errOut, "goroutine") {
		t.Fatalf("exit %d %q %q, want 1 and one line starting %q", code, out, errOut, want)
	}
	withSecret := strings.Replace(dead, "http://", "http://ops:s3cret@", 1) + "/?k=qsecret"
	code, _, errOut = run(t, map[string]string{"JOBGUARD_TOKEN": "tsecret-0123456789"}, "show", "j-1", "--url", withSecret)
	if code != 1 || strings.Contains(errOut, "s3cret") || strings.Contains(errOut, "ops") || strings.Contains(errOut, "secret") {
		t.Fatalf("a URL with credentials: exit %d %q", code, errOut)
	}
	for _, bad := range []string{"ftp://example.com", "127.0.0.1:8080", "http://"} {
		if code, _, errOut = run(t, nil, "list", "--url", bad); code != 2 || !strings.Contains(errOut, "--url/JOBGUARD_URL") {
			t.Errorf("--url %q: exit %d %q, want 2", bad, code, errOut)
		}
	}
	if code, _, errOut = run(t, map[string]string{"HTTP_ADDR": "nonsense"}, "list"); code != 2 || !strings.Contains(errOut, "HTTP_ADDR") {
		t.Errorf("a bad HTTP_ADDR: exit %d %q, want 2", code, errOut)
	}
}

// A 503 problem with Retry-After says when to retry; a 429 too; an answer that is not a
// problem (a proxy's page, another server) or a redirect says --url may be wrong. All exit 1
// with one line, and the server's text is printed escaped.
func TestJobsAnswersThatAreNotTheJob(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/jobs/busy":
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"type":"https://jobguard.dev/problems/unavailable","code":"unavailable","title":"Service Unavailable","status":503,"detail":"Redis did not answer \u001b[31min time"}`))
		case "/jobs/limited":
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"code":"rate_limited","title":"Too Many Requests","status":429,"detail":"over the budget"}`))
		case "/jobs/moved":
			http.Redirect(w, r, "https://elsewhere.example/jobs/moved", http.StatusFound)
		default:
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte("<html>bad gateway</html>"))
		}
	}))
	defer srv.Close()
	at := map[string]string{"JOBGUARD_URL": srv.URL}
	for id, want := range map[string]string{
		"busy":    "Service Unavailable: Redis did not answer \\x1b[31min time (unavailable for now: retry after 1 s)",
		"limited": "Too Many Requests: over the budget (rate limited: retry after 3 s)",
		"moved":   "302 Found (a redirect, not followed",
		"other":   "502 Bad Gateway (not a jobguard problem answer",
	} {
		code, out, errOut := run(t, at, "show", id)
		if code != 1 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, want) || strings.Contains(errOut, "\x1b") {
			t.Errorf("%s: exit %d %q %q, want 1 and %q", id, code, out, errOut, want)
		}
	}
}

// jobguard jobs -h (and --help, help) prints the usage on stdout and exits 0; no verb is a usage
// error; -v (and --version, version) prints the version line.
func TestJobsHelpAndVersion(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"-h", "--help", "help"} {
		if code, out, errOut := run(t, nil, arg); code != 0 || !strings.HasPrefix(out, "usage: jobguard jobs list") || errOut != "" {
			t.Errorf("%s: exit %d %q %q", arg, code, out, errOut)
		}
	}
	if code, out, _ := run(t, nil, "list", "-h"); code != 0 || !strings.Contains(out, "JOBGUARD_URL") {
		t.Errorf("list -h: exit %d %q", code, out)
	}
	if code, out, errOut := run(t, nil); code != 2 || out != "" || !strings.Contains(errOut, "usage: jobguard jobs") {
		t.Errorf("no verb: exit %d %q %q", code, out, errOut)
	}
	for _, arg := range []string{"-v", "--version", "version"} {
		if code, out, _ := run(t, nil, arg); code != 0 || out != "jobguard test\n" {
			t.Errorf("%s: exit %d %q", arg, code, out)
		}
	}
}
