package app

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/redistest"
)

const benchClients = 16

type latencies struct {
	perSecond float64
	p50, p99  time.Duration
}

// load runs n calls of do over benchClients goroutines and measures them.
func load(b *testing.B, n int, do func(i int) error) latencies {
	var next atomic.Int64
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < benchClients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t0 := time.Now()
				if err := do(i); err != nil {
					b.Error(err)
					return
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return latencies{perSecond: float64(n) / elapsed.Seconds(), p50: lat[n/2], p99: lat[n*99/100]}
}

func httpPoster(base string) func(path, body, key string) error {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchClients}}
	return func(path, body, key string) error {
		req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", `"`+key+`"`)
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 202 {
			return fmt.Errorf("%s: %d", path, resp.StatusCode)
		}
		return nil
	}
}

// BenchmarkEnqueueEndpoint compares, over real HTTP on loopback and in one run, POST
// /jobs/rebuild-cache (strict decoding, Idempotency-Key, dedup marker, job record, delivery) with a
// Fiber handler that only calls asynq's Client.Enqueue, and both with direct Client.Enqueue calls.
func BenchmarkEnqueueEndpoint(b *testing.B) {
	n := max(b.N, 2000)
	body := func(i int) string { return fmt.Sprintf(`{"tenant_id":"t1","resource_id":"r%d"}`, i) }

	db := redistest.NewDB(b)
	// One tenant sends everything: a limit that never refuses keeps the limiter's round trip in
	// the measurement.
	cfg, err := FromLookup(lookupFrom(map[string]string{"REDIS_URL": db.URL(), "HTTP_ADDR": "127.0.0.1:0",
		"RATE_LIMIT": "1000000", "RATE_LIMIT_BURST": "1000000"}))
	if err != nil {
		b.Fatal(err)
	}
	a, err := New(context.Background(), cfg, RoleAPI, nopLogger())
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()

	baseDB := redistest.NewDB(b)
	baseClient := asynq.NewClientFromRedisClient(baseDB.Client)
	base := fiber.New(fiber.Config{DisableStartupMessage: true})
	base.Post("/jobs/rebuild-cache", func(c *fiber.Ctx) error {
		if _, err := baseClient.Enqueue(asynq.NewTask("rebuild-cache", c.Body())); err != nil {
			return err
		}
		return c.SendStatus(202)
	})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = base.Listener(ln) }()
	defer func() { _ = base.Shutdown() }()

	b.ResetTimer()
	post := httpPoster("http://" + a.Addr())
	ours := load(b, n, func(i int) error { return post("/jobs/rebuild-cache", body(i), fmt.Sprint("key-", i)) })
	basePost := httpPoster("http://" + ln.Addr().String())
	theirs := load(b, n, func(i int) error { return basePost("/jobs/rebuild-cache", body(i), "") })
	directDB := redistest.NewDB(b)
	direct := asynq.NewClientFromRedisClient(directDB.Client)
	raw := load(b, n, func(i int) error {
		_, err := direct.Enqueue(asynq.NewTask("rebuild-cache", []byte(body(i))))
		return err
	})
	b.StopTimer()

	b.ReportMetric(ours.perSecond, "jobguard-req/s")
	b.ReportMetric(theirs.perSecond, "fiber+enqueue-req/s")
	b.ReportMetric(raw.perSecond, "direct-enqueue/s")
	b.ReportMetric(ours.perSecond/theirs.perSecond, "ratio-vs-fiber")
	b.ReportMetric(ours.perSecond/raw.perSecond, "ratio-vs-direct")
	b.ReportMetric(float64(ours.p50.Microseconds())/1000, "jobguard-p50-ms")
	b.ReportMetric(float64(ours.p99.Microseconds())/1000, "jobguard-p99-ms")
	b.ReportMetric(float64(theirs.p50.Microseconds())/1000, "fiber-p50-ms")
	b.ReportMetric(float64(theirs.p99.Microseconds())/1000, "fiber-p99-ms")
}
