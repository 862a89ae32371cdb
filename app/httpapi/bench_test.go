package httpapi

import (
	"context"
	"fmt"
	"io"
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

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/internal/benchfig"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/tasks/registry"
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
		// Read to the end: net/http reuses a connection only after its body was read, and a
		// benchmark that dials per request measures the dial.
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 202 {
			return fmt.Errorf("%s: %d", path, resp.StatusCode)
		}
		return nil
	}
}

// BenchmarkEnqueueEndpoint compares, over real HTTP on loopback, POST /jobs/rebuild-cache (strict
// decoding, Idempotency-Key, the tenant's rate limit, dedup marker, job record, delivery) with a
// Fiber handler that only calls asynq's Client.Enqueue, and both with direct Client.Enqueue calls:
// BENCH_ROUNDS rounds (default 5) of BENCH_TASKS requests (default 2000) each side, interleaved
// (the order alternates per round), printed as each side's median and spread. Run with
// -benchtime 1x.
func BenchmarkEnqueueEndpoint(b *testing.B) {
	n, rounds := benchfig.Tasks(2000), benchfig.Rounds()
	body := func(round, i int) string { return fmt.Sprintf(`{"tenant_id":"t1","resource_id":"r%d-%d"}`, round, i) }

	db := redistest.NewDB(b)
	// One tenant sends everything: a limit that never refuses keeps the limiter's take (in the
	// create's pipeline) in the measurement.
	cfg, err := config.FromLookup(lookupFrom(map[string]string{"REDIS_URL": db.URL(), "HTTP_ADDR": "127.0.0.1:0",
		"RATE_LIMIT": "1000000", "RATE_LIMIT_BURST": "1000000"}), registry.All())
	if err != nil {
		b.Fatal(err)
	}
	a, err := newProcess(context.Background(), cfg, RoleAPI, nopLogger())
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
	directDB := redistest.NewDB(b)
	direct := asynq.NewClientFromRedisClient(directDB.Client)

	post, basePost := httpPoster("http://"+a.Addr()), httpPoster("http://"+ln.Addr().String())
	names := []string{"jobguard", "fiber+enqueue", "direct enqueue"}
	sides := make([][]latencies, len(names))
	run := func(side, round int) {
		switch side {
		case 0:
			sides[0] = append(sides[0], load(b, n, func(i int) error {
				return post("/jobs/rebuild-cache", body(round, i), fmt.Sprint("key-", round, "-", i))
			}))
		case 1:
			sides[1] = append(sides[1], load(b, n, func(i int) error { return basePost("/jobs/rebuild-cache", body(round, i), "") }))
		default:
			sides[2] = append(sides[2], load(b, n, func(i int) error {
				_, err := direct.Enqueue(asynq.NewTask("rebuild-cache", []byte(body(round, i))))
				return err
			}))
		}
	}
	b.ResetTimer()
	for round := 0; round < rounds; round++ {
		order := []int{0, 1, 2}
		if round%2 == 1 {
			order = []int{1, 0, 2}
		}
		for _, side := range order {
			run(side, round)
		}
	}
	b.StopTimer()

	fig := func(side int, f func(latencies) float64) []float64 {
		out := make([]float64, len(sides[side]))
		for i, l := range sides[side] {
			out[i] = f(l)
		}
		return out
	}
	perSecond := func(l latencies) float64 { return l.perSecond }
	p50 := func(l latencies) float64 { return float64(l.p50.Microseconds()) / 1000 }
	p99 := func(l latencies) float64 { return float64(l.p99.Microseconds()) / 1000 }
	fmt.Printf("\nPOST /jobs/rebuild-cache with Idempotency-Key: %d rounds of %d requests each side, interleaved, %d clients\n", rounds, n, benchClients)
	fmt.Printf("| figure | %s | %s | %s | jobguard / fiber+enqueue |\n|---|---|---|---|---|\n", names[0], names[1], names[2])
	for _, row := range []struct {
		what string
		f    func(latencies) float64
	}{{"requests/s", perSecond}, {"p50 ms", p50}, {"p99 ms", p99}} {
		fmt.Printf("| %s | %s | %s | %s | %s |\n", row.what, benchfig.Summary(fig(0, row.f)), benchfig.Summary(fig(1, row.f)),
			benchfig.Summary(fig(2, row.f)), benchfig.Ratio(fig(1, row.f), fig(0, row.f)))
	}
	for _, row := range []struct {
		what string
		f    func(latencies) float64
	}{{"requests/s", perSecond}, {"p99 ms", p99}} {
		benchfig.AddRow(benchfig.Row{Benchmark: "POST /jobs/rebuild-cache with Idempotency-Key vs Fiber + Client.Enqueue", Measure: row.what,
			Baseline: benchfig.Summary(fig(1, row.f)), Jobguard: benchfig.Summary(fig(0, row.f)), Ratio: benchfig.Ratio(fig(1, row.f), fig(0, row.f))})
	}
	b.ReportMetric(benchfig.Median(fig(0, perSecond)), "jobguard-req/s")
	b.ReportMetric(benchfig.Median(fig(1, perSecond)), "fiber+enqueue-req/s")
	b.ReportMetric(benchfig.Median(fig(0, perSecond))/benchfig.Median(fig(1, perSecond)), "ratio-vs-fiber")
	b.ReportMetric(benchfig.Median(fig(0, p99)), "jobguard-p99-ms")
	b.ReportMetric(benchfig.Median(fig(1, p99)), "fiber-p99-ms")
}
