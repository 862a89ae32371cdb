package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/jobguard/jobguard/app/problem"
)

// The monitoring UI's API answers a queue or a task that does not exist with a 404 problem+json
// (asynqmon answers the first with a 500 whose log line said nothing, the second in plain text).
func TestMonitoringAPIAnswersMissingQueuesAndTasksWith404(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, nil)
	for _, path := range []string{
		"/monitoring/api/queues/nosuch",
		"/monitoring/api/queues/" + strings.Repeat("q", 300),
		"/monitoring/api/queues/default/tasks/nosuchtask",
	} {
		resp, body := get(t, r.base+path)
		if p := decodeProblem(t, resp, body); p.Status != http.StatusNotFound || p.Code != problem.CodeNotFound {
			t.Errorf("%s: %d %s, want a 404 problem+json", path[:min(len(path), 60)], resp.StatusCode, body)
		}
	}
}
