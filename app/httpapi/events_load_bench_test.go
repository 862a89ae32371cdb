package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
)

// BenchmarkEventStreamsRedisLoad opens N streams of GET /jobs/{id}/events, spread over J queued
// jobs, on an API process with a Redis of its own, and reports the Redis commands per second
// they cost (INFO commandstats, the commands Lua runs included), measured over 3 s once every
// stream has its first event. go test ./app -run '^$' -bench EventStreamsRedisLoad -benchtime 1x
func BenchmarkEventStreamsRedisLoad(b *testing.B) {
	for _, c := range []struct{ streams, jobs int }{{1, 1}, {100, 1}, {1000, 1}, {1000, 10}} {
		b.Run(fmt.Sprintf("streams=%d/jobs=%d", c.streams, c.jobs), func(b *testing.B) {
			for range b.N {
				b.ReportMetric(streamsRedisLoad(b, c.streams, c.jobs), "redis_cmds/s")
			}
		})
	}
}

func streamsRedisLoad(b *testing.B, streams, jobs int) float64 {
	srv := redistest.Start(b)
	env := map[string]string{"REDIS_URL": "redis://" + srv.Addr + "/0", "RATE_LIMIT": "0",
		"EVENT_STREAMS_PER_TENANT": strconv.Itoa(streams), "EVENT_STREAMS_MAX": strconv.Itoa(streams)}
	r := startApp(b, RoleAPI, env)
	ids := make([]string, jobs)
	for i := range ids {
		resp, body := do(b, http.MethodPost, r.base+"/jobs/rebuild-cache", fmt.Sprintf(`{"tenant_id":"t1","resource_id":"r%d"}`, i), "Content-Type", "application/json")
		if resp.StatusCode != 202 {
			b.Fatalf("enqueue: %d %s", resp.StatusCode, body)
		}
		var a jobAnswer
		if err := json.Unmarshal([]byte(body), &a); err != nil {
			b.Fatal(err)
		}
		ids[i] = a.JobID
	}
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: streams}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan error, streams)
	for i := range streams {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.base+"/jobs/"+ids[i%jobs]+"/events", nil)
			resp, err := client.Do(req)
			if err != nil {
				ready <- err
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				ready <- fmt.Errorf("stream %d: %d", i, resp.StatusCode)
				return
			}
			buf := make([]byte, 4096)
			_, err = resp.Body.Read(buf)
			ready <- err
			for err == nil {
				_, err = resp.Body.Read(buf)
			}
		}()
	}
	for range streams {
		if err := <-ready; err != nil {
			b.Fatal(err)
		}
	}
	rdb := srv.Client(b, 0)
	before := commandCalls(b, rdb)
	t0 := time.Now()
	time.Sleep(3 * time.Second)
	after := commandCalls(b, rdb)
	return float64(after-before-1) / time.Since(t0).Seconds() // less the first INFO
}

// commandCalls is the number of commands Redis ran (INFO commandstats).
func commandCalls(b *testing.B, rdb *redis.Client) int64 { return commandCallsOf(b, rdb) }

// sumCalls adds the calls of every command of INFO commandstats.
func sumCalls(info string) int64 {
	var total int64
	for _, line := range strings.Split(info, "\n") {
		_, rest, ok := strings.Cut(line, ":calls=")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		v, _ := strconv.ParseInt(n, 10, 64)
		total += v
	}
	return total
}
