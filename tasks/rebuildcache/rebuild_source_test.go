package rebuildcache

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/tasks"
)

// The source's errors are stable texts that never name its URL (user name, key).
func TestFetchSourceErrorsAreStableTexts(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("resource_id") {
		case "down":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "gone":
			w.WriteHeader(http.StatusNotFound)
		case "slow":
			select { // past the client's timeout, or until the test ends
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}
	}))
	defer up.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln.Addr().String()
	_ = ln.Close()
	secret := func(hostport string) string { return "http://svc-user:pw@" + hostport + "/src?api_key=KEY-1" }
	client := &http.Client{Timeout: time.Second} // generous: a loaded machine answers the 503 slowly too
	for _, tc := range []struct{ url, resource, want string }{
		{secret(strings.TrimPrefix(up.URL, "http://")), "down", "source: HTTP 503"},
		{secret(strings.TrimPrefix(up.URL, "http://")), "gone", "source: HTTP 404"},
		{secret(strings.TrimPrefix(up.URL, "http://")), "slow", "source: request failed (timeout)"},
		{secret(closed), "any", "source: request failed (connection refused)"},
		{"http://svc-user:pw@no-such-host.invalid/src?api_key=KEY-1", "any", "source: request failed (host not found)"},
	} {
		_, err := fetchSource(bg, tasks.Deps{Settings: map[string]string{SettingSourceURL: tc.url}, HTTP: client}, RebuildCachePayload{TenantID: "t", ResourceID: tc.resource})
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: got %v, want %q", tc.resource, err, tc.want)
		}
	}
}

// REBUILD_SOURCE_URL's validation accepts empty (computed locally) and http(s) URLs; its error
// shows the URL without the user name, password or query values.
func TestSourceURLSettingRedacts(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"", "http://source:8080/x", "https://u:p@source/x?k=v"} {
		if err := validateSourceURL(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"ftp://svc-user:hunter2@source/x?api_key=KEY-42", "http://", "svc-user:hunter2@source"} {
		err := validateSourceURL(bad)
		if err == nil {
			t.Errorf("%q accepted", bad)
			continue
		}
		for _, secret := range []string{"svc-user", "hunter2", "KEY-42"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%q: the error carries %q: %v", bad, secret, err)
			}
		}
	}
}
