package httpapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/internal/benchfig"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/tasks/registry"
)

// BenchmarkBulkVsSingle compares, over real HTTP on loopback, one POST /jobs/rebuild-cache/bulk of
// BENCH_TASKS items (default 1,000) with the same number of single POST /jobs/rebuild-cache
// requests, sent one after another and from benchClients clients at once: BENCH_ROUNDS rounds
// (default 5), the sides' order alternating per round, printed as each side's median and spread
// of the milliseconds the 1,000 jobs took. Run with -benchtime 1x.
func BenchmarkBulkVsSingle(b *testing.B) {
	n, rounds := benchfig.Tasks(1000), benchfig.Rounds()
	item := func(side, round, i int) string {
		return fmt.Sprintf(`{"tenant_id":"t1","resource_id":"s%d-r%d-%d"}`, side, round, i)
	}
	db := redistest.NewDB(b)
	cfg, err := config.FromLookup(lookupFrom(map[string]string{"REDIS_URL": db.URL(), "HTTP_ADDR": "127.0.0.1:0",
		"RATE_LIMIT": "1000000", "RATE_LIMIT_BURST": "1000000", "BODY_LIMIT": "4194304"}), registry.All())
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
	base := "http://" + a.Addr()
	post := httpPoster(base)
	client := &http.Client{}
	bulk := func(round int) error {
		items := make([]string, n)
		for i := range items {
			items[i] = item(0, round, i)
		}
		resp, err := client.Post(base+"/jobs/rebuild-cache/bulk", "application/json", strings.NewReader(`{"items":[`+strings.Join(items, ",")+`]}`))
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), fmt.Sprintf(`"created":%d`, n)) {
			return fmt.Errorf("bulk: %d %.200s", resp.StatusCode, body)
		}
		return nil
	}
	names := []string{"bulk", "single x1", fmt.Sprintf("single x%d", benchClients)}
	ms := make([][]float64, len(names))
	run := func(side, round int) {
		start := time.Now()
		switch side {
		case 0:
			if err := bulk(round); err != nil {
				b.Fatal(err)
			}
		case 1:
			for i := 0; i < n; i++ {
				if err := post("/jobs/rebuild-cache", item(1, round, i), ""); err != nil {
					b.Fatal(err)
				}
			}
		default:
			load(b, n, func(i int) error { return post("/jobs/rebuild-cache", item(2, round, i), "") })
		}
		ms[side] = append(ms[side], float64(time.Since(start).Microseconds())/1000)
	}
	b.ResetTimer()
	for round := 0; round < rounds; round++ {
		order := []int{0, 1, 2}
		if round%2 == 1 {
			order = []int{2, 1, 0}
		}
		for _, side := range order {
			run(side, round)
		}
	}
	b.StopTimer()
	fmt.Printf("\n%d rebuild-cache jobs: one POST /jobs/rebuild-cache/bulk vs single POSTs, %d rounds interleaved (ms per %d jobs)\n", n, rounds, n)
	fmt.Printf("| %s | %s | %s | bulk / single x1 | bulk / single x%d |\n|---|---|---|---|---|\n", names[0], names[1], names[2], benchClients)
	fmt.Printf("| %s | %s | %s | %s | %s |\n", benchfig.Summary(ms[0]), benchfig.Summary(ms[1]), benchfig.Summary(ms[2]),
		benchfig.Ratio(ms[1], ms[0]), benchfig.Ratio(ms[2], ms[0]))
	b.ReportMetric(benchfig.Median(ms[0]), "bulk-ms")
	b.ReportMetric(benchfig.Median(ms[1]), "single-ms")
	b.ReportMetric(benchfig.Median(ms[2]), "single-x16-ms")
}
