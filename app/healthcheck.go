package app

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/internal/redact"
)

// healthcheckTimeout bounds jobguard healthcheck's whole request.
const healthcheckTimeout = 2 * time.Second

// healthcheckURL is what jobguard healthcheck asks: HEALTHCHECK_URL, else /readyz on the loopback
// address of the port the probes are served on (ADMIN_ADDR's, else HTTP_ADDR's).
func healthcheckURL(lookup func(string) (string, bool)) (string, error) {
	if u, ok := lookup("HEALTHCHECK_URL"); ok && u != "" {
		return u, nil
	}
	addr := config.Defaults().HTTPAddr
	if v, ok := lookup("HTTP_ADDR"); ok && v != "" {
		addr = v
	}
	if v, ok := lookup("ADMIN_ADDR"); ok && v != "" {
		addr = v
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("config: HTTP_ADDR/ADMIN_ADDR %q is not host:port", addr)
	}
	return "http://" + net.JoinHostPort("127.0.0.1", port) + "/readyz", nil
}

// healthcheck is jobguard healthcheck: 0 when url answers 200 within healthcheckTimeout, else 1
// with one line on stderr saying why. No shell or curl needed in the image.
func healthcheck(ctx context.Context, url string, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(ctx, healthcheckTimeout)
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
