package redact

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"http://svc-user:pw@127.0.0.1:8080/src?api_key=SECRET", "http://127.0.0.1:8080/src?api_key=REDACTED"},
		{"https://user@host/p?a=1&b=2&flag", "https://host/p?a=REDACTED&b=REDACTED&REDACTED"},
		{"redis://:s3cret@redis:6379/0", "redis://redis:6379/0"},
		{"redis://u:p%40ss@[::1]:6379/0?dial_timeout=3s", "redis://[::1]:6379/0?dial_timeout=REDACTED"},
		{"http://host/path#token=abc", "http://host/path"},
		{"http://us/er:pa/ss@host/x", "http://host/x"}, // unescaped '/' in the userinfo: still removed
		{"http://host:8080/plain", "http://host:8080/plain"},
		{"host:6379", "host:6379"},
	} {
		if got := URL(tc.in); got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestStringFindsURLsInText(t *testing.T) {
	t.Parallel()
	in := `source: Get "http://svc:***@127.0.0.1:1/src?api_key=K1&x=2": dial tcp 127.0.0.1:1: connect: connection refused; also redis://a:b@r:6379/0 and http://ok/path`
	want := `source: Get "http://127.0.0.1:1/src?api_key=REDACTED&x=REDACTED": dial tcp 127.0.0.1:1: connect: connection refused; also redis://r:6379/0 and http://ok/path`
	if got := String(in); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if s := "no url here: dial tcp 127.0.0.1:1"; String(s) != s {
		t.Fatal("text without a URL changed")
	}
}

// net/http's own error for a refused source: it hides the password only.
func TestErrorOfNetHTTP(t *testing.T) {
	t.Parallel()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://svc-user:pw@127.0.0.1:1/src?api_key=SECRET", nil)
	_, err := http.DefaultClient.Do(req)
	if err == nil || !strings.Contains(err.Error(), "svc-user") {
		t.Fatalf("net/http's error changed: %v", err)
	}
	red := Error(fmt.Errorf("source: %w", err))
	for _, secret := range []string{"svc-user", "pw", "SECRET"} {
		if strings.Contains(red.Error(), secret) {
			t.Errorf("%q left in %s", secret, red)
		}
	}
	if !errors.Is(red, err) {
		t.Error("the redacted error no longer wraps the original")
	}
	if plain := errors.New("plain"); Error(plain) != plain || Error(nil) != nil {
		t.Error("an error without secrets must be returned as it is")
	}
}
