package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/jobguard/jobguard/internal/redact"
)

// HealthcheckTimeout bounds jobguard healthcheck's whole request.
const HealthcheckTimeout = 2 * time.Second

// healthcheckURL is what jobguard healthcheck asks: HEALTHCHECK_URL, else /readyz on the loopback
// address of the port the probes are served on (ADMIN_ADDR's, else HTTP_ADDR's).
func healthcheckURL(env Env) (string, error) {
	if u := env.get("HEALTHCHECK_URL"); u != "" {
		return u, nil
	}
	addr := firstSet(env.get("ADMIN_ADDR"), env.get("HTTP_ADDR"), DefaultHTTPAddr)
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("config: HTTP_ADDR/ADMIN_ADDR %q is not host:port", addr)
	}
	return "http://" + net.JoinHostPort("127.0.0.1", port) + "/readyz", nil
}

// Healthcheck is jobguard healthcheck: 0 when its URL (healthcheckURL) answers 200 within
// HealthcheckTimeout, else 1 with one line on stderr saying why. No shell or curl needed in the image.
func Healthcheck(ctx context.Context, env Env) int {
	url, err := healthcheckURL(env)
	if err != nil {
		fmt.Fprintln(env.Stderr, "jobguard healthcheck:", err)
		return ExitError
	}
	return healthcheck(ctx, url, env.Stderr)
}

func healthcheck(ctx context.Context, url string, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(ctx, HealthcheckTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		fmt.Fprintln(stderr, "jobguard healthcheck: config: HEALTHCHECK_URL is not a URL")
		return 1
	}
	client := &http.Client{
		Transport:     &http.Transport{DisableKeepAlives: true, Proxy: nil},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintln(stderr, "jobguard healthcheck: no answer:", redact.Error(err))
		return 1
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(stderr, "jobguard healthcheck:", resp.Status)
		return 1
	}
	return 0
}
