package httpapi

import (
	"net/http"
	"strings"
	"testing"
)

// The monitoring UI's API answers a queue that does not exist with a 404, as asynqmon answers a
// missing task (a 500 before, whose log line said nothing), in plain text as asynqmon's own
// errors are: its page shows an error's text as it comes.
func TestMonitoringAPIAnswersMissingQueuesAndTasksWith404(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, nil)
	for _, path := range []string{
		"/monitoring/api/queues/nosuch",
		"/monitoring/api/queues/" + strings.Repeat("q", 300),
		"/monitoring/api/queues/default/tasks/nosuchtask",
	} {
		resp, body := get(t, r.base+path)
		if resp.StatusCode != http.StatusNotFound || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
			t.Errorf("%s: %d %q %s, want a plain-text 404", path[:min(len(path), 60)], resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
}
