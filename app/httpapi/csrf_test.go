package httpapi

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/hibiken/asynq"
)

// A page on another origin cannot make a logged-in browser change anything through the UI: a
// form-style cross-site POST is refused and the queue stays running; the UI's own pages, and
// clients that are not browsers, still can.
func TestMonitoringRefusesCrossOriginChanges(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, map[string]string{"MONITORING_USER": "admin", "MONITORING_PASSWORD": "s3cret"})
	const queue = "csrf-probe"
	if _, err := r.Client().Enqueue(asynq.NewTask("probe", nil), asynq.Queue(queue)); err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspectorFromRedisClient(r.Redis())
	paused := func() bool {
		t.Helper()
		info, err := insp.GetQueueInfo(queue)
		if err != nil {
			t.Fatal(err)
		}
		return info.Paused
	}
	post := func(action string, header ...string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, r.base+"/monitoring/api/queues/"+queue+":"+action, strings.NewReader("x=1"))
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth("admin", "s3cret")
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	for _, tc := range []struct {
		name   string
		header []string
	}{
		{"modern browser, cross-site", []string{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"}},
		{"modern browser, same-site other origin", []string{"Origin", "http://other.localhost", "Sec-Fetch-Site", "same-site"}},
		{"older browser, Origin only", []string{"Origin", "https://evil.example"}},
		{"Sec-Fetch-Site only", []string{"Sec-Fetch-Site", "cross-site"}},
		{"opaque origin", []string{"Origin", "null"}},
	} {
		resp, body := post("pause", tc.header...)
		p := decodeProblem(t, resp, body)
		if p.Status != http.StatusForbidden || strings.Contains(body, "evil") {
			t.Fatalf("%s: %+v", tc.name, p)
		}
		if paused() {
			t.Fatalf("%s: the queue was paused by a cross-origin request", tc.name)
		}
	}

	// The UI's own page: the browser says same-origin and names this origin.
	if resp, body := post("pause", "Origin", r.base, "Sec-Fetch-Site", "same-origin"); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("same-origin pause: %d %s", resp.StatusCode, body)
	}
	if !paused() {
		t.Fatal("same-origin pause answered 204 but the queue is not paused")
	}
	// An older browser on the UI's page: Origin only, matching the request's host.
	if resp, body := post("resume", "Origin", r.base); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("same-origin resume by Origin only: %d %s", resp.StatusCode, body)
	}
	if paused() {
		t.Fatal("resume answered 204 but the queue is still paused")
	}
	// curl and scripts send neither header: not a browser, so no ambient credentials to abuse.
	if resp, body := post("pause"); resp.StatusCode != http.StatusNoContent || !paused() {
		t.Fatalf("non-browser pause: %d %s", resp.StatusCode, body)
	}
	// Reading stays open to any origin (GET is never a change).
	req, _ := http.NewRequest(http.MethodGet, r.base+"/monitoring/api/queues", nil)
	req.SetBasicAuth("admin", "s3cret")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("cross-site GET: %d", resp.StatusCode)
	}
}
