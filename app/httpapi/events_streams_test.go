package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// appOnOwnRedis starts an API process on a Redis server of its own, whose INFO commandstats
// counts only this test's commands.
func appOnOwnRedis(t *testing.T, env map[string]string) (*running, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	full := map[string]string{"REDIS_URL": "redis://" + srv.Addr + "/0", "RATE_LIMIT": "0"}
	for k, v := range env {
		full[k] = v
	}
	return startApp(t, RoleAPI, full), srv.Client(t, 0)
}

// commandsIn counts the commands Redis ran during d (less the INFO that ends the count).
func commandsIn(t *testing.T, rdb *redis.Client, d time.Duration) int64 {
	t.Helper()
	before := commandCallsOf(t, rdb)
	time.Sleep(d) // a window of time is what is measured
	return commandCallsOf(t, rdb) - before - 1
}

func commandCallsOf(t testing.TB, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	return sumCalls(info)
}

// openStream opens the events of job id with the tenant's token and waits for its first event.
func openStream(t *testing.T, r *running, id, token string) (context.CancelFunc, <-chan sse) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	resp := openEvents(t, ctx, r, "/jobs/"+id+"/events", bearer(token)...)
	if resp.StatusCode != 200 {
		cancel()
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	ch := readEvents(resp)
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no first event within 5s")
	}
	return cancel, ch
}

// A stream whose client has gone stops polling within about a poll interval, even on a job that
// writes nothing (before, it polled until its next heartbeat write failed: 15-30 s). Found by an
// adversarial probe (streams polled on for 12-16 s after their client left).
func TestEventsStreamStopsWhenItsClientLeaves(t *testing.T) {
	t.Parallel()
	r, rdb := appOnOwnRedis(t, twoTenants)
	id := enqueueJob(t, r, bearer(tokenA)...)
	cancel, _ := openStream(t, r, id, tokenA)
	if n := commandsIn(t, rdb, time.Second); n < 2 {
		t.Fatalf("an open stream ran %d commands in 1s, want its polls", n)
	}
	cancel() // the client leaves
	deadline := time.Now().Add(5 * time.Second)
	for {
		time.Sleep(3 * eventsPoll)
		n := commandsIn(t, rdb, time.Second)
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream still polls (%d commands in 1s) %s after its client left", n, 5*time.Second)
		}
	}
}

// Streams of one job share one poller: 50 streams of a job cost Redis what one does (within a
// factor of 2), not 50 times as much. Found by an adversarial probe (1,000 streams of one job
// cost 16.3k commands/s).
func TestEventStreamsOfAJobShareOnePoller(t *testing.T) {
	t.Parallel()
	r, rdb := appOnOwnRedis(t, map[string]string{"API_TOKENS": twoTenants["API_TOKENS"], "EVENT_STREAMS_PER_TENANT": "100"})
	id := enqueueJob(t, r, bearer(tokenA)...)
	stop, _ := openStream(t, r, id, tokenA)
	one := commandsIn(t, rdb, 2*time.Second)
	for range 49 {
		c, _ := openStream(t, r, id, tokenA)
		defer c()
	}
	fifty := commandsIn(t, rdb, 2*time.Second)
	stop()
	if one < 2 || fifty > 2*one {
		t.Fatalf("commands in 2s: %d with one stream, %d with 50 streams of the same job", one, fifty)
	}
}

// Open streams are capped per tenant (EVENT_STREAMS_PER_TENANT) and per process
// (EVENT_STREAMS_MAX): past either, 429 problem+json too_many_streams with Retry-After; a stream
// that ends gives its place back. Found by an adversarial probe (a tenant opened 1,500 streams of
// one job, all 200).
func TestEventStreamsAreCapped(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, map[string]string{"API_TOKENS": twoTenants["API_TOKENS"], "RATE_LIMIT": "0",
		"EVENT_STREAMS_PER_TENANT": "3", "EVENT_STREAMS_MAX": "5"})
	idA := enqueueJob(t, r, bearer(tokenA)...)
	resp, body := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t2","resource_id":"w"}`, bearer(tokenB)...)
	if resp.StatusCode != 202 {
		t.Fatalf("enqueue: %d %s", resp.StatusCode, body)
	}
	var b jobAnswer
	_ = json.Unmarshal([]byte(body), &b)
	idB := b.JobID
	refused := func(id, token, why string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp := openEvents(t, ctx, r, "/jobs/"+id+"/events", bearer(token)...)
		if resp.StatusCode == 200 {
			t.Fatalf("%s: 200, a stream", why)
		}
		body, _ := io.ReadAll(resp.Body)
		p := decodeProblem(t, resp, string(body))
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); p.Status != http.StatusTooManyRequests || p.Code != problem.CodeTooManyStreams || err != nil || s < 1 {
			t.Fatalf("%s: %+v, Retry-After %q", why, p, resp.Header.Get("Retry-After"))
		}
	}
	var firstA context.CancelFunc
	for i := range 3 {
		c, _ := openStream(t, r, idA, tokenA)
		if i == 0 {
			firstA = c
		} else {
			defer c()
		}
	}
	refused(idA, tokenA, "a tenant's 4th stream")
	for range 2 {
		c, _ := openStream(t, r, idB, tokenB)
		defer c()
	}
	refused(idB, tokenB, "the process's 6th stream")
	firstA()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithCancel(context.Background())
		resp := openEvents(t, ctx, r, "/jobs/"+idA+"/events", bearer(tokenA)...)
		cancel()
		if resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a place given back by a stream that ended: still %d after 5s", resp.StatusCode)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The sibling of the streams: a long-poll (GET /jobs/{id}?wait=) counts against the same caps,
// and ends within about a poll interval when its client leaves, instead of reading the job's
// status every 200 ms until its wait is over (up to 30 s). Before, a tenant's long-polls were
// bounded only by its request rate: at 100/s, 3,000 waits of 30 s, 15,000 reads a second.
func TestLongPollsAreCappedAndStopWhenTheirClientLeaves(t *testing.T) {
	t.Parallel()
	r, rdb := appOnOwnRedis(t, map[string]string{"API_TOKENS": twoTenants["API_TOKENS"], "EVENT_STREAMS_PER_TENANT": "2"})
	id := enqueueJob(t, r, bearer(tokenA)...)
	wait := func() (context.CancelFunc, chan int) {
		ctx, cancel := context.WithCancel(context.Background())
		code := make(chan int, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.base+"/jobs/"+id+"?wait=30s", nil)
			req.Header.Set("Authorization", "Bearer "+tokenA)
			resp, err := testClient.Do(req)
			if err != nil {
				code <- 0
				return
			}
			resp.Body.Close()
			code <- resp.StatusCode
		}()
		return cancel, code
	}
	// Each long-poll is admitted before the next starts: their connections race otherwise, and the
	// third could take a place before the second (which the test would then see refused instead).
	admitted := func(n int) bool {
		r.API().feeds.mu.Lock()
		defer r.API().feeds.mu.Unlock()
		return r.API().feeds.open == n
	}
	c1, _ := wait()
	testsupport.Eventually(t, 5*time.Second, "the first long-poll admitted", func() bool { return admitted(1) })
	c2, _ := wait()
	defer c2()
	testsupport.Eventually(t, 5*time.Second, "the second long-poll admitted", func() bool { return admitted(2) })
	testsupport.Eventually(t, 5*time.Second, "a third long-poll refused", func() bool {
		c3, code := wait()
		defer c3()
		select {
		case n := <-code:
			return n == http.StatusTooManyRequests
		case <-time.After(time.Second):
			return false
		}
	})
	c1() // the first client leaves: its place is given back, and its reads stop
	testsupport.Eventually(t, 5*time.Second, "a long-poll admitted again", func() bool {
		c4, code := wait()
		defer c4()
		select {
		case n := <-code:
			return n != http.StatusTooManyRequests
		case <-time.After(time.Second):
			return true // waiting: admitted
		}
	})
	c2()
	time.Sleep(3 * eventsPoll)
	if n := commandsIn(t, rdb, time.Second); n != 0 {
		t.Fatalf("%d commands in 1s after every long-poll's client left", n)
	}
}
