package httpapi

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// keepAlive is one client connection that sends its requests one after another.
type keepAlive struct {
	conn net.Conn
	br   *bufio.Reader
}

func dialKeepAlive(t *testing.T, addr string) *keepAlive {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &keepAlive{conn: conn, br: bufio.NewReader(conn)}
}

// roundTrip writes raw and reads one answer to a request of method (HEAD answers carry no body).
func (k *keepAlive) roundTrip(method, raw string) (*http.Response, string, error) {
	_ = k.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(k.conn, raw); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(k.br, &http.Request{Method: method})
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp, string(b), err
	}
	// A request that is valid HTTP is checked against openapi.json as testClient's are; one that
	// is not tests the parser and is exempt.
	if req, perr := http.ReadRequest(bufio.NewReader(strings.NewReader(raw))); perr == nil {
		req.URL.Host = k.conn.RemoteAddr().String()
		reqBody, _ := io.ReadAll(req.Body)
		if cerr := checkExchange(req, reqBody, resp, b, false); cerr != nil {
			return resp, string(b), fmt.Errorf("openapi.json: %s %s answered %d %.300s: %w", req.Method, req.URL.RequestURI(), resp.StatusCode, b, cerr)
		}
	}
	return resp, string(b), nil
}

func rawRequest(method, path, body string, header ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: jobguard.test\r\n", method, path)
	for i := 0; i+1 < len(header); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", header[i], header[i+1])
	}
	if body != "" || method == http.MethodPost || method == http.MethodPut {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	return b.String()
}

// promtoolCheck fails the test unless promtool (scripts/ensure-deps.sh installs it) finds the
// exposition clean.
func promtoolCheck(t *testing.T, body string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: scripts/ensure-deps.sh installs it (Debian package prometheus)")
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}
