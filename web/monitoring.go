// Package web mounts the asynqmon UI inside the Fiber app, on the process's shared Redis client.
package web

import (
	"context"
	"crypto/subtle"
	"errors"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/gofiber/fiber/v2/middleware/basicauth"
	"github.com/hibiken/asynq"
	"github.com/hibiken/asynqmon"
	"github.com/redis/go-redis/v9"
)

// DefaultRoot is where the UI is mounted unless Monitoring.Root says otherwise.
const DefaultRoot = "/monitoring"

// ErrUnprotected is returned by Mount when the UI would be reachable from other hosts without
// credentials.
var ErrUnprotected = errors.New("web: monitoring UI needs credentials when not served on loopback only")

// Monitoring configures the UI.
type Monitoring struct {
	// Root is the URL path the UI is served under. Default "/monitoring".
	Root string
	// User and Password turn on basic auth. Empty: no auth, which Mount accepts only when Loopback.
	User     string
	Password string
	// Loopback says the HTTP listener is reachable from this host only.
	Loopback bool
	// ReadOnly lets the UI look but not pause, delete, run or archive anything.
	ReadOnly bool
	// PrometheusAddress, when set, makes the UI draw its queue charts from that Prometheus.
	PrometheusAddress string
	// Timeout bounds each of the UI's API calls; past it the call answers 503. Default 5s.
	Timeout time.Duration
	// Jobs, when set, makes the UI's task actions act on jobs (actions.go) and serves the jobs and
	// schedules pages (pages.go) under Root.
	Jobs Jobs
}

// sharedConn hands asynqmon the process's client instead of letting it dial its own. asynqmon's
// Close would close that client, so the handler it returns is never closed: the process closes the
// client once, at exit.
type sharedConn struct{ c redis.UniversalClient }

func (s sharedConn) MakeRedisClient() any { return s.c }

// Mount serves asynqmon on app under m.Root, using rdb for every Redis call it makes. Changes sent
// by a browser from another origin are refused with ErrCrossOrigin (see sameOrigin).
func Mount(app *fiber.App, rdb redis.UniversalClient, m Monitoring) error {
	if m.Root == "" {
		m.Root = DefaultRoot
	}
	m.Root = "/" + strings.Trim(m.Root, "/")
	if m.User == "" && !m.Loopback {
		return ErrUnprotected
	}
	h := asynqmon.New(asynqmon.Options{
		RootPath:          m.Root,
		RedisConnOpt:      sharedConn{rdb},
		ReadOnly:          m.ReadOnly,
		PrometheusAddress: m.PrometheusAddress,
	})
	handlers := []any{m.Root}
	if m.User != "" {
		user, pass := []byte(m.User), []byte(m.Password)
		handlers = append(handlers, basicauth.New(basicauth.Config{
			Realm: "jobguard monitoring",
			Authorizer: func(u, p string) bool {
				// Both compared in constant time, and both always compared.
				okUser := subtle.ConstantTimeCompare([]byte(u), user)
				okPass := subtle.ConstantTimeCompare([]byte(p), pass)
				return okUser&okPass == 1
			},
		}))
	}
	// After the credentials: a browser on another origin would send the cached ones with its POST.
	handlers = append(handlers, sameOrigin())
	if m.Timeout <= 0 {
		m.Timeout = 5 * time.Second
	}
	ping := func(ctx context.Context) error { return rdb.Ping(ctx).Err() }
	page := adaptor.HTTPHandler(h)
	if m.Jobs != nil { // asynqmon's page links to jobguard's (banner.go)
		page = withBanner(page, m.Root)
	}
	ui := apiCalls(h, page, m.Root+"/api/", m.Timeout, ping)
	var own *pages
	if m.Jobs != nil {
		insp := asynq.NewInspectorFromRedisClient(rdb) // on the shared client; never closed, as asynqmon's
		own = &pages{jobs: m.Jobs, insp: insp, root: m.Root, readOnly: m.ReadOnly, timeout: m.Timeout}
		if !m.ReadOnly { // read-only: asynqmon refuses every change itself
			ui = (&actions{jobs: m.Jobs, insp: insp, prefix: m.Root + "/api/queues/", timeout: m.Timeout, ping: ping}).handler(ui)
		}
	}
	ui = textErrors(ui, m.Root+"/api/")
	handlers = append(handlers, func(c *fiber.Ctx) error {
		// The bare root redirects so that the UI's relative asset paths resolve under it.
		if c.Path() == m.Root {
			return c.Redirect(m.Root+"/", fiber.StatusMovedPermanently)
		}
		if own != nil {
			if handled, err := own.serve(c); handled {
				return err
			}
		}
		return ui(c)
	})
	app.Use(handlers...)
	return nil
}
