package httpapi

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/app/problem"
)

// smuggled is a second request hidden after a body whose length the client and a proxy in front
// may read differently; a server that reads it answers a request nobody in front of it saw.
const smuggled = "GET /healthz HTTP/1.1\r\nHost: jobguard.test\r\n\r\n"

// A request whose body length is ambiguous (Transfer-Encoding with Content-Length, a transfer
// coding other than chunked, two Content-Lengths) is 400 problem+json and its connection is closed
// after the answer (RFC 9112 section 6.3): the bytes after the body are never read as a request.
func TestAmbiguousBodyLengthClosesTheConnection(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, nil)
	addr := strings.TrimPrefix(r.base, "http://")
	head := "POST /jobs/x/cancel HTTP/1.1\r\nHost: jobguard.test\r\nContent-Type: application/json\r\n"
	for _, c := range []struct{ name, field, raw string }{
		{"Content-Length then chunked", "Transfer-Encoding", head + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled},
		{"chunked then Content-Length", "Transfer-Encoding", head + "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n" + smuggled},
		{"a coding other than chunked", "Transfer-Encoding", head + "Transfer-Encoding: gzip\r\n\r\n0\r\n\r\n" + smuggled},
		{"chunked twice", "Transfer-Encoding", head + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled},
		{"two Content-Lengths", "Content-Length", head + "Content-Length: 0\r\nContent-Length: 2\r\n\r\n{}" + smuggled},
	} {
		k := dialKeepAlive(t, addr)
		resp, body, err := k.roundTrip(http.MethodPost, c.raw)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", c.name, resp.StatusCode, body)
		} else if p := decodeProblem(t, resp, body); p.Field != c.field || p.Code != problem.CodeMalformedRequest {
			t.Errorf("%s: problem %+v, want field %s code %s", c.name, p, c.field, problem.CodeMalformedRequest)
		}
		if !resp.Close {
			t.Errorf("%s: the answer does not say Connection: close", c.name)
		}
		_ = k.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if next, err := http.ReadResponse(k.br, nil); err == nil {
			t.Errorf("%s: the bytes after the body were answered as a request: %d", c.name, next.StatusCode)
		} else if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Logf("%s: after the answer: %v", c.name, err)
		} else if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: the connection stayed open after the answer", c.name)
		}
	}
	// A plain chunked body is read as before, and the connection kept.
	k := dialKeepAlive(t, addr)
	resp, body, err := k.roundTrip(http.MethodPost, head+"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
	if err != nil || resp.StatusCode != http.StatusNotFound || resp.Close {
		t.Fatalf("chunked alone: %v %v %s (close %v), want 404 (no job x) on a kept connection", err, resp.StatusCode, body, resp.Close)
	}
}

// doHeaders is do with header lines added as given (several with one name are several lines).
func doHeaders(t *testing.T, method, url, body string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// A single-valued header sent twice is 400 problem+json naming it, whichever line comes first:
// the parser keeps one of them (the first Authorization, the last Content-Type or Host), and a
// proxy in front may have checked the other. The answer repeats no value.
func TestRepeatedSingleValuedHeaderIs400(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAll, map[string]string{"API_TOKENS": twoTenants["API_TOKENS"]})
	good, bad := "Bearer "+tokenA, "Bearer not-a-token-0123456789"
	json := []string{"Content-Type", "application/json"}
	rebuild := `{"tenant_id":"t1","resource_id":"r1"}`
	for _, c := range []struct {
		name, method, path, body, field string
		header                          []string
	}{
		{"Authorization, the valid one first", http.MethodGet, "/jobs/x", "", "Authorization", []string{"Authorization", good, "Authorization", bad}},
		{"Authorization, the valid one last", http.MethodGet, "/jobs/x", "", "Authorization", []string{"Authorization", bad, "Authorization", good}},
		{"Authorization on /schedules", http.MethodGet, "/schedules", "", "Authorization", []string{"Authorization", good, "Authorization", good}},
		{"Authorization on /metrics", http.MethodGet, "/metrics", "", "Authorization", []string{"Authorization", good, "Authorization", good}},
		{"Content-Type", http.MethodPost, "/jobs/rebuild-cache", rebuild, "Content-Type", []string{"Authorization", good, "Content-Type", "text/plain", "Content-Type", "application/json"}},
		{"Last-Event-ID", http.MethodGet, "/jobs/x/events", "", "Last-Event-ID", []string{"Authorization", good, "Last-Event-ID", "1", "Last-Event-ID", "2"}},
		{"X-Request-ID", http.MethodGet, "/jobs/x", "", "X-Request-ID", []string{"Authorization", good, "X-Request-ID", "id-1", "X-Request-ID", "id-2"}},
		{"Authorization on the UI", http.MethodGet, "/monitoring/jobs", "", "Authorization", []string{"Authorization", "Basic dTpw", "Authorization", "Basic dTpx"}},
	} {
		resp, body := doHeaders(t, c.method, r.base+c.path, c.body, c.header...)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d %.200s, want 400", c.name, resp.StatusCode, body)
			continue
		}
		p := decodeProblem(t, resp, body)
		if p.Field != c.field || p.Code != problem.CodeValidationFailed {
			t.Errorf("%s: problem %+v, want field %s", c.name, p, c.field)
		}
		for _, v := range []string{tokenA, "not-a-token", "text/plain", "id-1", "dTpw"} {
			if strings.Contains(body, v) {
				t.Errorf("%s: the answer repeats %q: %s", c.name, v, body)
			}
		}
	}
	// Host twice, which net/http will not send.
	k := dialKeepAlive(t, strings.TrimPrefix(r.base, "http://"))
	resp, body, err := k.roundTrip(http.MethodGet, "GET /healthz HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	if p := decodeProblem(t, resp, body); p.Status != http.StatusBadRequest || p.Field != "Host" {
		t.Errorf("Host twice: %+v, want 400 field Host", p)
	}
	// One of each, and headers that may repeat (Accept), pass.
	resp, body = doHeaders(t, http.MethodPost, r.base+"/jobs/rebuild-cache", rebuild, append(json, "Authorization", good, "Accept", "application/json", "Accept", "*/*")...)
	if resp.StatusCode != http.StatusAccepted {
		t.Errorf("one of each: %d %s", resp.StatusCode, body)
	}
}
