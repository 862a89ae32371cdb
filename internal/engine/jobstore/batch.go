package jobstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A batcher sends the script calls of concurrent runs together: one pipeline carries what queued
// up while the previous ones were on the wire (group commit). A start or a finish alone costs a
// write and a read system call on each side, and at concurrency 50 those are most of the stack's
// CPU per task (docs/BENCHMARKS.md); in one pipeline, many calls share them. A caller that finds
// no pipeline on the wire sends its own at once, so an idle process waits for nothing, and no
// goroutine runs while nothing is queued. One pipeline at a time (Redis runs one command at a
// time anyway) measured best: at concurrency 50, 2.85-2.90 round trips per task against 3.45-3.72
// with two and 4.00 without batching, and 0.50-0.55x of bare asynq's rate against 0.44-0.45x. Each call's answer is its own, as
// in any pipeline: a script that fails fails alone; a connection that fails fails the batch. On
// a cluster calls go alone, as before: a batch waits for every node it names, and one node's
// failover would hold up the calls to the others.

// maxFlushing is how many pipelines may be on the wire at once; maxBatch the most calls of one.
const (
	maxFlushing = 1
	maxBatch    = 128
)

type batcher struct {
	rdb      redis.UniversalClient
	cluster  bool
	maxBatch int
	// durable is durable mode: a batch that holds a durable call ends with a WAIT, which covers
	// every call in it.
	durable  Durability
	mu       sync.Mutex
	queue    []*batchCall
	flushing int
}

// batchCall is one caller's calls and, once sent, their commands.
type batchCall struct {
	ctx   context.Context
	calls []scriptCall
	cmds  []*redis.Cmd
	// durable: the calls make a promise (durable mode waits for replicas); werr is the WAIT's verdict.
	durable bool
	werr    error
	done    chan struct{}
	// then, for a posted call (nobody waits on done), gets the commands once they are answered.
	then func([]*redis.Cmd)
}

// run sends calls in one pipeline with whatever else is queued, and returns their commands (as
// runPipelined does). A caller whose ctx ends first gets its error; its calls are not sent if
// their batch has not left yet (dropAbandoned), and may still run if it has.
func (b *batcher) run(ctx context.Context, calls []scriptCall) []*redis.Cmd {
	cmds, _ := b.send1(ctx, calls, false)
	return cmds
}

// runDurable is run for calls that make a promise: in durable mode their batch ends with a WAIT,
// whose verdict is the error (nil when durable mode is off).
func (b *batcher) runDurable(ctx context.Context, calls []scriptCall) ([]*redis.Cmd, error) {
	return b.send1(ctx, calls, true)
}

// ErrNotSent marks the error of a batched call that was never sent: its caller's context had ended
// before its batch left (with the context's error). A call whose caller gave up after its batch
// left fails with the context's error alone: it may still run.
var ErrNotSent = errors.New("jobstore: not sent")

func (b *batcher) send1(ctx context.Context, calls []scriptCall, durable bool) ([]*redis.Cmd, error) {
	if err := ctx.Err(); err != nil {
		return failedCmds(ctx, calls, notSent(err)), nil
	}
	if b.cluster {
		return runPipelined(ctx, b.rdb, b.durability(durable), calls)
	}
	c := &batchCall{ctx: ctx, calls: calls, durable: durable, done: make(chan struct{})}
	if b.enqueue(c) {
		b.flush()
	}
	select {
	case <-c.done:
		return c.cmds, c.werr
	case <-ctx.Done():
		return failedCmds(ctx, calls, ctx.Err()), nil
	}
}

// post queues calls without waiting for them: then gets their commands once answered, on the
// goroutine that sent them (keep it short). When no pipeline is on the wire a goroutine of its own
// sends it, so the caller goes on at once; a caller that is between two of its own round trips
// still finds its posted calls sent before what it queues next (one pipeline at a time, in order).
// On a cluster the calls go alone and the caller waits for them, as run's do: calls sent from
// goroutines of their own would keep no order, and a later start of the same resource could come
// before a finish and find its lease still held.
func (b *batcher) post(ctx context.Context, calls []scriptCall, then func([]*redis.Cmd)) {
	if err := ctx.Err(); err != nil {
		then(failedCmds(ctx, calls, err))
		return
	}
	if b.cluster {
		cmds, _ := runPipelined(ctx, b.rdb, Durability{}, calls)
		then(cmds)
		return
	}
	c := &batchCall{ctx: ctx, calls: calls, done: make(chan struct{}), then: then}
	if b.enqueue(c) {
		go b.drain()
	}
}

// enqueue queues c and reports whether its caller leads the next flush (no pipeline is on the wire:
// it takes the one place).
func (b *batcher) enqueue(c *batchCall) (lead bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.queue = append(b.queue, c)
	lead = b.flushing < maxFlushing
	if lead {
		b.flushing++
	}
	return lead
}

// queued is how many callers wait for the next batch (tests).
func (b *batcher) queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// durability is what a batch waits for: durable mode's setting when it holds a durable call.
func (b *batcher) durability(durable bool) Durability {
	if durable {
		return b.durable
	}
	return Durability{}
}

// flush sends one batch, then hands what queued meanwhile to a goroutine of its own, so the caller
// that flushed goes back to its work with its answer.
func (b *batcher) flush() {
	b.send(b.take())
	if b.more() {
		go b.drain()
	}
}

// drain sends batches until none is queued. One goroutine keeps at it while calls keep coming: a
// goroutine per batch grew a fresh stack through the client's calls each time (runtime.copystack
// was 4% of a fair drain's CPU).
func (b *batcher) drain() {
	for {
		b.send(b.take())
		if !b.more() {
			return
		}
	}
}

// take is the next batch of the queue (at most maxBatch callers).
func (b *batcher) take() []*batchCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := min(len(b.queue), b.maxBatch)
	batch := b.queue[:n:n]
	b.queue = b.queue[n:]
	return batch
}

// more says whether calls queued while a batch was on the wire; when none did, the flush is over.
func (b *batcher) more() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) > 0 {
		return true
	}
	b.flushing--
	return false
}

// send runs a batch's calls in one pipeline and hands each caller its commands. The pipeline has
// the latest deadline among the callers' and outlives their cancellation: one caller giving up
// does not fail the others.
func (b *batcher) send(batch []*batchCall) {
	if batch = dropAbandoned(batch); len(batch) == 0 {
		return
	}
	var all []scriptCall
	var deadline time.Time
	unbounded, durable := false, false
	for _, c := range batch {
		durable = durable || c.durable
		all = append(all, c.calls...)
		d, ok := c.ctx.Deadline()
		unbounded = unbounded || !ok
		if d.After(deadline) {
			deadline = d
		}
	}
	ctx, cancel := context.WithoutCancel(batch[0].ctx), context.CancelFunc(func() {})
	if !unbounded {
		ctx, cancel = context.WithDeadline(ctx, deadline)
	}
	defer cancel()
	cmds, werr := runPipelined(ctx, b.rdb, b.durability(durable), all)
	for _, c := range batch {
		c.cmds, cmds = cmds[:len(c.calls)], cmds[len(c.calls):]
		c.werr = werr
		close(c.done)
		if c.then != nil {
			c.then(c.cmds)
		}
	}
}

// dropAbandoned answers, without sending them, the calls of waiting callers that gave up while
// their batch queued (they were answered with their context's error), and returns the others.
// Sent late, such a call runs for nobody: a create would stand unconfirmed until its claim runs
// out, and a fair wait sent with it would hold a place of its type's capacity all that time, its
// caller's abandon having reached Redis before it. A posted call (then set) is sent regardless:
// its poster went on by design.
func dropAbandoned(batch []*batchCall) []*batchCall {
	live := batch[:0:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil && c.then == nil {
			c.cmds = failedCmds(c.ctx, c.calls, notSent(err))
			close(c.done)
			continue
		}
		live = append(live, c)
	}
	return live
}

// notSent is err (a context's) marked ErrNotSent.
func notSent(err error) error { return fmt.Errorf("%w: %w", ErrNotSent, err) }

// failedCmds are the commands of calls that were not sent, each failed with err.
func failedCmds(ctx context.Context, calls []scriptCall, err error) []*redis.Cmd {
	out := make([]*redis.Cmd, len(calls))
	for i := range calls {
		out[i] = redis.NewCmd(ctx)
		out[i].SetErr(err)
	}
	return out
}

func newBatcher(rdb redis.UniversalClient, d Durability) *batcher {
	_, cluster := rdb.(*redis.ClusterClient)
	return &batcher{rdb: rdb, cluster: cluster, durable: d, maxBatch: maxBatch}
}

// RunScript runs script through the store's batcher, sharing pipelines with the runs' own
// scripts (group commit): for adapters whose scripts are on every run's path too (the
// middleware's lease level). Its answer is the command's, as Script.Run's would be.
func (s *Store) RunScript(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	return s.batch.run(ctx, []scriptCall{{script, func(ctx context.Context, c redis.Scripter) *redis.Cmd {
		return script.EvalSha(ctx, c, keys, args...)
	}}})[0]
}

// PostScript is RunScript without waiting: the call goes out with the next pipeline and then gets
// its answer on the batcher's goroutine (keep it short). Calls queued after it by any caller of
// this store run after it (one pipeline at a time, in order; on a cluster it goes alone, waited for).
func (s *Store) PostScript(ctx context.Context, then func(*redis.Cmd), script *redis.Script, keys []string, args ...any) {
	s.batch.post(ctx, []scriptCall{{script, func(ctx context.Context, c redis.Scripter) *redis.Cmd {
		return script.EvalSha(ctx, c, keys, args...)
	}}}, func(cmds []*redis.Cmd) { then(cmds[0]) })
}

// RunScriptDurable is RunScript for a write that makes a promise: in durable mode its batch ends
// with a WAIT, and the error says whether the replicas acknowledged it (ErrNotDurable when not;
// nil when durable mode is off).
func (s *Store) RunScriptDurable(ctx context.Context, script *redis.Script, keys []string, args ...any) (*redis.Cmd, error) {
	cmds, werr := s.batch.runDurable(ctx, []scriptCall{{script, func(ctx context.Context, c redis.Scripter) *redis.Cmd {
		return script.EvalSha(ctx, c, keys, args...)
	}}})
	return cmds[0], werr
}

// Batched is the store's client with its EVALSHA and EVAL sent through a batcher of its own
// (group commit, up to maxBulkBatch calls a pipeline), every other command as it is: an asynq
// client on it sends the enqueues of concurrent callers (a bulk's, a workflow's roots) in shared
// pipelines, since asynq enqueues one task per call (one EVALSHA each; its NOSCRIPT fallback is
// an EVAL, batched too). Its own batcher: a bulk's pipelines do not hold up the runs' scripts.
func (s *Store) Batched() redis.UniversalClient {
	b := newBatcher(s.rdb, Durability{}) // asynq's enqueue makes no promise of jobguard's: the confirm does
	b.maxBatch = maxBulkBatch
	return batchedClient{UniversalClient: s.rdb, b: b}
}

// maxBulkBatch is the most calls of one pipeline of Batched: a bulk of 1,000 in one.
const maxBulkBatch = 1024

// LoadBulkScripts loads the scripts a bulk pipelines as EVALSHA (create, confirm), once per
// process: a script found missing later (Redis restarted) is sent again alone, slower.
func (s *Store) LoadBulkScripts(ctx context.Context) error {
	if s.bulkLoaded.Load() {
		return nil
	}
	for _, sc := range []*redis.Script{createScript, confirmScript} {
		if err := sc.Load(ctx, s.rdb).Err(); err != nil {
			return fmt.Errorf("jobstore: load scripts: %w", err)
		}
	}
	s.bulkLoaded.Store(true)
	return nil
}

type batchedClient struct {
	redis.UniversalClient
	b *batcher
}

func (c batchedClient) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return c.b.run(ctx, []scriptCall{{eval: func(ctx context.Context, p redis.Scripter) *redis.Cmd {
		return p.EvalSha(ctx, sha, keys, args...)
	}}})[0]
}

func (c batchedClient) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return c.b.run(ctx, []scriptCall{{eval: func(ctx context.Context, p redis.Scripter) *redis.Cmd {
		return p.Eval(ctx, script, keys, args...)
	}}})[0]
}
