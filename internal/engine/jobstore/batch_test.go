package jobstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
)

var echoScript = redis.NewScript(`
-- echo (tests): KEYS[1] a key; ARGV[1] a value, stored at the key; returns it, or an error for 'fail'
if ARGV[1] == 'fail' then return redis.error_reply('asked to fail') end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]`)

func echoCall(key, v string) scriptCall {
	return scriptCall{echoScript, func(ctx context.Context, c redis.Scripter) *redis.Cmd {
		return echoScript.EvalSha(ctx, c, []string{key}, v)
	}}
}

// Concurrent callers share pipelines and each gets its own answers, a failing script failing
// alone; a caller whose context has ended gets its error and sends nothing.
func TestBatcherSharesPipelines(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	count := &testsupport.RoundTrips{}
	rdb := redis.NewClient(&redis.Options{Addr: db.Server.Addr, DB: db.N})
	rdb.AddHook(count)
	t.Cleanup(func() { rdb.Close() })
	b := newBatcher(rdb, Durability{})
	const callers = 200
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := fmt.Sprint(i)
			if i%50 == 7 {
				v = "fail"
			}
			cmds := b.run(bg, []scriptCall{echoCall(fmt.Sprintf("k%d", i), v), echoCall(fmt.Sprintf("j%d", i), v+"b")})
			got, err := cmds[0].Text()
			switch {
			case v == "fail" && err == nil:
				errs <- fmt.Errorf("caller %d: a failing script answered %q", i, got)
			case v != "fail" && (err != nil || got != v):
				errs <- fmt.Errorf("caller %d: %q %v", i, got, err)
			}
			if second, err := cmds[1].Text(); err != nil || second != v+"b" {
				errs <- fmt.Errorf("caller %d: second call %q %v", i, second, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := count.N(); n >= callers {
		t.Errorf("%d callers sent %d pipelines: none shared", callers, n)
	}
	t.Logf("%d callers, %d pipelines", callers, count.N())

	ctx, cancel := context.WithCancel(bg)
	cancel()
	if err := b.run(ctx, []scriptCall{echoCall("late", "x")})[0].Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled caller: %v", err)
	}
	if db.Client.Exists(bg, "late").Val() != 0 {
		t.Fatal("a cancelled caller's script ran")
	}
}
