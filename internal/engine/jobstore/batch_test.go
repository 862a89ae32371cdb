package jobstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

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

// A caller that gives up while its calls queue behind a pipeline on the wire is answered with its
// context's error, and its calls are never sent: run late, they would run for nobody (a create
// left unconfirmed, a fair wait holding a place of its type's capacity). The callers beside it
// are sent as before.
func TestBatcherDropsTheCallsOfACallerThatGaveUp(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	slow := &slowFirstPipeline{holding: make(chan struct{}), release: make(chan struct{})}
	rdb := redis.NewClient(&redis.Options{Addr: db.Server.Addr, DB: db.N})
	rdb.AddHook(slow)
	t.Cleanup(func() { rdb.Close() })
	if err := echoScript.Load(bg, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	b := newBatcher(rdb, Durability{})
	first := make(chan error, 1)
	go func() { first <- b.run(bg, []scriptCall{echoCall("first", "1")})[0].Err() }()
	<-slow.holding // the first pipeline is on the wire: the next callers queue
	ctx, cancel := context.WithCancel(bg)
	gaveUp, kept := make(chan error, 1), make(chan error, 1)
	go func() { gaveUp <- b.run(ctx, []scriptCall{echoCall("gave-up", "2")})[0].Err() }()
	go func() { kept <- b.run(bg, []scriptCall{echoCall("kept", "3")})[0].Err() }()
	for b.queued() < 2 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that gave up: %v, want its context's error", err)
	}
	close(slow.release)
	if err, err2 := <-first, <-kept; err != nil || err2 != nil {
		t.Fatalf("the other callers: %v, %v", err, err2)
	}
	if n := db.Client.Exists(bg, "gave-up").Val(); n != 0 || db.Client.Exists(bg, "kept").Val() != 1 {
		t.Fatalf("the call of the caller that gave up ran (%d), or the one beside it did not", n)
	}
}

// slowFirstPipeline holds the first pipeline of scripts it sees until release is closed, saying so on holding.
type slowFirstPipeline struct {
	testsupport.PipelinesOnly
	once    sync.Once
	holding chan struct{}
	release chan struct{}
}

func (h *slowFirstPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		first := false
		if cmds[0].Name() == "evalsha" { // not a connection's set-up
			h.once.Do(func() { first = true })
		}
		if first {
			close(h.holding)
			<-h.release
		}
		return next(ctx, cmds)
	}
}
