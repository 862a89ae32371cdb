package app

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/app/admin"
	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
	"github.com/jobguard/jobguard/tasks/registry"
)

// startAppThen is startApp with a hook that runs between New and Run (to set a clock or a grace).
func startAppThen(t *testing.T, role Role, env map[string]string, before func(*App)) *running {
	t.Helper()
	full := map[string]string{"HTTP_ADDR": "127.0.0.1:0", "SHUTDOWN_TIMEOUT": "2s"}
	if _, ok := env["REDIS_URL"]; !ok {
		full["REDIS_URL"] = redistest.NewDB(t).URL()
	}
	for k, v := range env {
		full[k] = v
	}
	cfg, err := config.FromLookup(lookupFrom(full), registry.All())
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(context.Background(), cfg, role, zerolog.New(zerolog.NewTestWriter(t)))
	if err != nil {
		t.Fatal(err)
	}
	before(a)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{App: a, base: "http://" + a.Addr(), done: make(chan error, 1), stop: cancel}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() { r.shutdown(t) })
	return r
}

// A worker serves no UI, so it needs no UI credentials on a public address; an API process does.
func TestUICredentialsOnlyWhereTheUIIsServed(t *testing.T) {
	t.Parallel()
	w := startApp(t, RoleWorker, map[string]string{"HTTP_ADDR": "0.0.0.0:0"})
	_, port, _ := net.SplitHostPort(w.Addr())
	if resp, body := get(t, "http://127.0.0.1:"+port+"/healthz"); resp.StatusCode != 200 {
		t.Fatalf("worker on 0.0.0.0: healthz %d %s", resp.StatusCode, body)
	}
	for _, role := range []Role{RoleAPI, RoleAll} {
		cfg, err := config.FromLookup(lookupFrom(map[string]string{"HTTP_ADDR": "0.0.0.0:0", "REDIS_URL": redistest.NewDB(t).URL()}), registry.All())
		if err != nil {
			t.Fatal(err)
		}
		a, err := New(context.Background(), cfg, role, zerolog.Nop())
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Var != "MONITORING_USER" {
			if a != nil {
				a.Close()
			}
			t.Fatalf("%s on 0.0.0.0 without UI credentials: %v, want a MONITORING_USER error", role, err)
		}
	}
}

// With ADMIN_ADDR the probes and /metrics move there, open, and leave the API's port.
func TestAdminAddrServesMetricsAndProbesApart(t *testing.T) {
	t.Parallel()
	const token = "admin-test-token-0123456789"
	r := startApp(t, RoleAll, map[string]string{"ADMIN_ADDR": "127.0.0.1:0", "API_TOKENS": token + ":t1"})
	admin := "http://" + r.AdminAddr()
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		if resp, body := get(t, admin+path); resp.StatusCode != 200 {
			t.Errorf("admin %s: %d %s", path, resp.StatusCode, body)
		}
		if resp, _ := get(t, r.base+path, "Authorization", "Bearer "+token); resp.StatusCode != 404 {
			t.Errorf("HTTP_ADDR %s with ADMIN_ADDR set: %d, want 404", path, resp.StatusCode)
		}
	}
	_, body := get(t, admin+"/metrics")
	b := Build()
	want := `jobguard_build_info{commit="` + b.Commit + `",goversion="` + b.GoVersion + `",version="` + b.Version + `"} 1`
	if !strings.Contains(body, want) {
		t.Errorf("metrics lack %s", want)
	}
	// The API stays on HTTP_ADDR, behind its tokens.
	if resp, _ := get(t, r.base+"/jobs/x"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("API on HTTP_ADDR without a token: %d", resp.StatusCode)
	}
	if resp, _ := get(t, admin+"/jobs/x"); resp.StatusCode != 404 {
		t.Errorf("API on ADMIN_ADDR: %d, want 404", resp.StatusCode)
	}
}

// Without ADMIN_ADDR and with API_TOKENS, /metrics on HTTP_ADDR needs a token; the probes do not.
func TestMetricsOnHTTPAddrNeedATokenWhenTheAPIHasTokens(t *testing.T) {
	t.Parallel()
	const token = "metrics-test-token-0123456789"
	r := startApp(t, RoleWorker, map[string]string{"API_TOKENS": token + ":t1"})
	resp, body := get(t, r.base+"/metrics")
	if p := decodeProblem(t, resp, body); p.Status != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("metrics without a token: %+v", p)
	}
	if resp, _ := get(t, r.base+"/metrics", "Authorization", "Bearer wrong-token-0123456789"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("metrics with a wrong token: %d", resp.StatusCode)
	}
	if resp, body := get(t, r.base+"/metrics", "Authorization", "bearer "+token); resp.StatusCode != 200 || !strings.Contains(body, "jobguard_build_info") {
		t.Fatalf("metrics with a token: %d", resp.StatusCode)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if resp, body := get(t, r.base+path); resp.StatusCode != 200 {
			t.Fatalf("%s without a token: %d %s", path, resp.StatusCode, body)
		}
	}
}

// A worker's readiness follows its asynq server's heartbeat in Redis.
func TestWorkerReadinessFollowsItsHeartbeat(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	var skew atomic.Int64
	r := startAppThen(t, RoleWorker, map[string]string{"REDIS_URL": db.URL()}, func(a *App) {
		a.worker.SetClock(func() time.Time { return time.Now().Add(time.Duration(skew.Load())) })
	})
	ready := func() (int, string) {
		resp, body := get(t, r.base+"/readyz")
		return resp.StatusCode, body
	}
	if code, body := ready(); code != 200 {
		t.Fatalf("readyz just after the start: %d %s", code, body)
	}
	skew.Store(int64(admin.HeartbeatExpiry + time.Second)) // past the start's grace: the heartbeat counts
	testsupport.Eventually(t, 5*time.Second, "ready once the first heartbeat is written", func() bool {
		code, _ := ready()
		return code == 200
	})
	// Remove the heartbeat as its expiry would: not ready until asynq writes the next (every 5 s).
	ctx := context.Background()
	keys, err := db.Client.ZRange(ctx, "asynq:servers", 0, -1).Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("asynq:servers = %v, %v; want one server", keys, err)
	}
	db.Client.Del(ctx, keys...)
	db.Client.ZRem(ctx, "asynq:servers", keys[0])
	code, body := ready()
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "heartbeat") {
		t.Fatalf("readyz without a heartbeat: %d %s", code, body)
	}
	if resp, _ := get(t, r.base+"/healthz"); resp.StatusCode != 200 {
		t.Fatalf("healthz must not follow the heartbeat: %d", resp.StatusCode)
	}
	testsupport.Eventually(t, 8*time.Second, "ready again after the next heartbeat", func() bool {
		code, _ := ready()
		return code == 200
	})
}

// A worker's liveness follows its rescuer loop: a loop that stopped passing fails /healthz.
func TestWorkerLivenessFollowsTheRescuer(t *testing.T) {
	t.Parallel()
	var skew atomic.Int64
	var w *admin.WorkerHealth
	r := startAppThen(t, RoleWorker, map[string]string{"RESCUE_INTERVAL": "1m"}, func(a *App) {
		w = a.worker
		a.worker.SetClock(func() time.Time { return time.Now().Add(time.Duration(skew.Load())) })
	})
	testsupport.Eventually(t, 5*time.Second, "the rescuer loop started", func() bool { return !w.LastPass().IsZero() })
	if resp, body := get(t, r.base+"/healthz"); resp.StatusCode != 200 {
		t.Fatalf("healthz: %d %s", resp.StatusCode, body)
	}
	// With RESCUE_INTERVAL=1m no pass ends in the next minutes: skip past the staleness limit.
	skew.Store(int64(admin.RescueStaleAfter(time.Minute) + time.Second))
	resp, body := get(t, r.base+"/healthz")
	if p := decodeProblem(t, resp, body); p.Status != http.StatusServiceUnavailable || p.Code != problem.CodeNotLive || !strings.Contains(p.Detail, "rescuer") {
		t.Fatalf("healthz with a stale rescuer: %+v", p)
	}
	skew.Store(0)
	if resp, _ := get(t, r.base+"/healthz"); resp.StatusCode != 200 {
		t.Fatalf("healthz after the clock came back: %d", resp.StatusCode)
	}
}

// Passes move the rescuer's mark forward.
func TestRescuerPassesKeepTheWorkerLive(t *testing.T) {
	t.Parallel()
	var w *admin.WorkerHealth
	startAppThen(t, RoleWorker, map[string]string{"RESCUE_INTERVAL": "100ms"}, func(a *App) { w = a.worker })
	testsupport.Eventually(t, 5*time.Second, "the rescuer loop started", func() bool { return !w.LastPass().IsZero() })
	first := w.LastPass()
	testsupport.Eventually(t, 5*time.Second, "a pass ended", func() bool { return w.LastPass().After(first) })
	if err := w.Live(); err != nil {
		t.Fatal(err)
	}
}

// A worker with ADMIN_ADDR serves nothing on HTTP_ADDR (its probes and /metrics moved), so it does
// not listen there: a port that only ever answered 404 is a port a scanner finds for nothing.
func TestWorkerWithAdminAddrDoesNotListenOnHTTPAddr(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := ln.Addr().String()
	_ = ln.Close() // free again: the worker would take it if it listened
	r := startApp(t, RoleWorker, map[string]string{"HTTP_ADDR": httpAddr, "ADMIN_ADDR": "127.0.0.1:0"})
	if resp, body := get(t, "http://"+r.AdminAddr()+"/healthz"); resp.StatusCode != 200 {
		t.Fatalf("admin /healthz: %d %s", resp.StatusCode, body)
	}
	if r.Addr() != "" {
		t.Errorf("Addr() = %q, want \"\": the worker serves nothing on HTTP_ADDR", r.Addr())
	}
	if conn, err := net.DialTimeout("tcp", httpAddr, time.Second); err == nil {
		_ = conn.Close()
		t.Errorf("a worker with ADMIN_ADDR accepts connections on HTTP_ADDR %s", httpAddr)
	}
	// The roles that serve the API keep HTTP_ADDR.
	api := startApp(t, RoleAPI, map[string]string{"ADMIN_ADDR": "127.0.0.1:0"})
	if resp, _ := get(t, api.base+"/openapi.json"); resp.StatusCode != 200 {
		t.Errorf("api with ADMIN_ADDR: /openapi.json %d on HTTP_ADDR", resp.StatusCode)
	}
}
