package web

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/redistest"
)

// Each combination of Sec-Fetch-Site and Origin a browser or a script can send, against a real
// queue: a refused change is 403 and leaves the queue as it was.
func TestCrossOriginChangesAreRefused(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	const queue = "csrf"
	if _, err := asynq.NewClientFromRedisClient(db.Client).Enqueue(asynq.NewTask("probe", nil), asynq.Queue(queue)); err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspectorFromRedisClient(db.Client)
	var refused error
	app := fiber.New(fiber.Config{ErrorHandler: func(c *fiber.Ctx, err error) error {
		refused = err
		return c.SendStatus(fiber.StatusForbidden)
	}})
	if err := Mount(app, db.Client, Monitoring{Loopback: true}); err != nil {
		t.Fatal(err)
	}
	const host = "ui.test:8080"
	for _, tc := range []struct {
		name, site, origin string
		allowed            bool
	}{
		{"same-origin", "same-origin", "http://" + host, true},
		{"typed into the address bar", "none", "", true},
		{"not a browser", "", "", true},
		{"older browser, own origin", "", "http://" + host, true},
		{"cross-site", "cross-site", "https://evil.example", false},
		{"same-site, another origin", "same-site", "http://api.ui.test:8080", false},
		{"Sec-Fetch-Site wins over a matching Origin", "cross-site", "http://" + host, false},
		{"older browser, other origin", "", "https://evil.example", false},
		{"older browser, other port", "", "http://ui.test:9090", false},
		{"opaque origin", "", "null", false},
	} {
		refused = nil
		req := httptest.NewRequest(http.MethodPost, "http://"+host+"/monitoring/api/queues/"+queue+":pause", nil)
		if tc.site != "" {
			req.Header.Set("Sec-Fetch-Site", tc.site)
		}
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		resp, err := app.Test(req, -1)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		info, err := insp.GetQueueInfo(queue)
		if err != nil {
			t.Fatal(err)
		}
		if tc.allowed {
			if resp.StatusCode != http.StatusNoContent || !info.Paused {
				t.Fatalf("%s: %d, paused %v; want 204 and paused", tc.name, resp.StatusCode, info.Paused)
			}
			if err := insp.UnpauseQueue(queue); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if resp.StatusCode != http.StatusForbidden || !errors.Is(refused, ErrCrossOrigin) || info.Paused {
			t.Fatalf("%s: %d (%v), paused %v; want 403 ErrCrossOrigin and running", tc.name, resp.StatusCode, refused, info.Paused)
		}
	}
}
